//! Deterministic tests of the replica's duties, driven the way the raft thread drives it:
//! a few replicas with real Raft cores and real stores, a network that delivers every
//! message one millisecond later (or drops it across a cut), and syncs that complete when
//! the test says so. Every assertion is about effects, in the order the replica emitted
//! them, or about results as a shard would receive them.

use super::*;
use crate::raft::{Message, RaftConfig, Role, SnapshotMeta};
use crate::store::catalog::{CatalogOp, Registration};
use crate::store::kv::KvOp;
use crate::store::session::{Behavior, Session, SessionOp};
use crate::store::{CatalogResult, Command, CommandResult, KvResult, SessionResult, Tables};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const SHARDS: usize = 3;
/// Rounds a helper may run before it gives up: a test that needs more is stuck.
const ROUNDS_MAX: u64 = 100_000;

fn at(ms: u64) -> Now {
    Now {
        monotonic_ms: ms,
        unix_ms: 1_700_000_000_000 + ms,
    }
}

fn raft_config(id: NodeId) -> RaftConfig {
    let mut raft = RaftConfig::new(id);
    raft.election_timeout_ms = 300;
    raft.heartbeat_interval_ms = 100;
    raft.commit_notice_delay_ms = 5;
    raft.lease_ms = 250;
    raft
}

fn config(id: NodeId, bootstrap_single: bool, bootstrap_expect: u32) -> ReplicaConfig {
    ReplicaConfig {
        raft: raft_config(id),
        node_id: format!("node-{id}"),
        node_name: format!("server-{id}"),
        rpc_address: format!("10.0.0.{id}:8300"),
        datacenter: "dc1".to_string(),
        bootstrap_single,
        bootstrap_expect,
        snapshot_threshold_entries: 1_000_000,
        shard_count: SHARDS,
        acl_enabled: false,
        acl_initial_management: None,
        autopilot: Default::default(),
    }
}

fn server(id: NodeId, expect: u32) -> ServerInfo {
    ServerInfo {
        raft_id: id,
        node_id: format!("node-{id}"),
        name: format!("server-{id}"),
        rpc_address: format!("10.0.0.{id}:8300"),
        datacenter: "dc1".to_string(),
        expect,
        alive: true,
        left: false,
    }
}

fn put(key: &str, value: &str) -> Bytes {
    Bytes::from(
        Command::Kv(KvOp::Set {
            key: key.to_string(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            flags: 0,
        })
        .encode(),
    )
}

/// One replica and what the test driver saw it do.
struct Node {
    replica: Replica,
    /// Every effect, in order, with Sends kept too (their messages are also in flight).
    effects: Vec<Effect>,
    /// Background syncs handed out and not yet reported.
    background: Vec<u64>,
    /// Snapshots asked for and not yet written.
    snapshots: Vec<(SnapshotMeta, StoreVersion)>,
    /// The log as written (this driver's disk never fails), by index.
    log: BTreeMap<LogIndex, Entry>,
    /// Reads of the log asked for and not yet answered.
    log_reads: Vec<LogRead>,
    /// The snapshot being received from the leader, as its pieces were written.
    incoming: Option<(SnapshotMeta, Vec<u8>)>,
    /// Snapshots from the leader stored and not yet reported restored.
    restores: Vec<(SnapshotMeta, Bytes)>,
}

struct Cluster {
    nodes: BTreeMap<NodeId, Node>,
    now_ms: u64,
    in_flight: VecDeque<(NodeId, NodeId, Message)>,
    /// Nodes cut off from everyone: what they send and what is sent to them is lost.
    cut: BTreeSet<NodeId>,
    /// Report background syncs as done at the start of every round.
    auto_sync: bool,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            nodes: BTreeMap::new(),
            now_ms: 1_000,
            in_flight: VecDeque::new(),
            cut: BTreeSet::new(),
            auto_sync: true,
        }
    }

    /// A one-server cluster (`-dev`), led and serving.
    fn single() -> Cluster {
        let mut cluster = Cluster::new();
        cluster.add(1, config(1, true, 0));
        cluster.run_until(|c| c.serving_leader().is_some());
        cluster
    }

    /// Three servers bootstrapped by `bootstrap_expect = 3`, led and serving.
    fn three() -> Cluster {
        Cluster::three_with(|_| {})
    }

    fn three_with(adjust: impl Fn(&mut ReplicaConfig)) -> Cluster {
        Cluster::bootstrapped(3, adjust)
    }

    /// `n` servers bootstrapped by `bootstrap_expect = n`, led and serving.
    fn bootstrapped(n: u64, adjust: impl Fn(&mut ReplicaConfig)) -> Cluster {
        let mut cluster = Cluster::new();
        for id in 1..=n {
            let mut config = config(id, false, n as u32);
            adjust(&mut config);
            cluster.add(id, config);
        }
        let servers: Vec<ServerInfo> = (1..=n).map(|id| server(id, n as u32)).collect();
        for id in 1..=n {
            cluster.step(id, Input::Servers(servers.clone()));
        }
        cluster.run_until(|c| {
            c.serving_leader().is_some() && c.nodes.values().all(|n| n.replica.tables.index >= 2)
        });
        cluster
    }

    fn add(&mut self, id: NodeId, config: ReplicaConfig) {
        let replica = Replica::open(config, Recovered::default(), id * 7919, at(self.now_ms))
            .expect("a pristine replica opens");
        self.nodes.insert(
            id,
            Node {
                replica,
                effects: Vec::new(),
                background: Vec::new(),
                snapshots: Vec::new(),
                log: BTreeMap::new(),
                log_reads: Vec::new(),
                incoming: None,
                restores: Vec::new(),
            },
        );
        self.step(id, Input::Start);
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id]
    }

    fn replica(&self, id: NodeId) -> &Replica {
        &self.nodes[&id].replica
    }

    /// Steps one replica and records its effects; returns how many it emitted.
    fn step(&mut self, id: NodeId, input: Input) -> usize {
        let now = at(self.now_ms);
        let node = self.nodes.get_mut(&id).expect("node exists");
        node.replica.step(now, input).expect("no fatal error");
        let first = node.effects.len();
        node.effects.extend(node.replica.drain_effects());
        for effect in &node.effects[first..] {
            match effect {
                Effect::Send { to, message }
                    if !self.cut.contains(&id) && !self.cut.contains(to) =>
                {
                    self.in_flight.push_back((id, *to, message.clone()));
                }
                Effect::SyncInBackground { sequence } => {
                    assert!(node.background.last().is_none_or(|last| last < sequence));
                    node.background.push(*sequence);
                }
                Effect::WriteSnapshot { meta, version } => {
                    node.snapshots.push((meta.clone(), version.clone()));
                }
                Effect::Append {
                    truncate_from,
                    entries,
                    ..
                } => {
                    if let Some(from) = truncate_from {
                        node.log.split_off(from);
                    }
                    for entry in entries {
                        node.log.split_off(&entry.index);
                        node.log.insert(entry.index, entry.clone());
                    }
                }
                Effect::ReadLog(read) => node.log_reads.push(*read),
                Effect::SnapshotChunk(chunk) => {
                    if let Some(meta) = &chunk.meta {
                        node.incoming = Some((meta.clone(), Vec::new()));
                    }
                    let (_, assembled) = node.incoming.as_mut().expect("started");
                    assert_eq!(chunk.offset, assembled.len() as u64, "pieces in order");
                    assembled.extend_from_slice(&chunk.data);
                }
                Effect::InstallSnapshot { meta } => {
                    let (received, assembled) = node.incoming.take().expect("received");
                    assert_eq!(&received, meta);
                    node.restores.push((received, Bytes::from(assembled)));
                }
                _ => {}
            }
        }
        node.effects.len() - first
    }

    /// Reports every background sync of `id` done.
    fn complete_syncs(&mut self, id: NodeId) {
        let Some(&through) = self.nodes[&id].background.last() else {
            return;
        };
        self.nodes
            .get_mut(&id)
            .expect("node exists")
            .background
            .clear();
        self.step(id, Input::Synced { through });
    }

    /// One millisecond: deliver what was sent in the previous one, finish background syncs
    /// when automatic, and tick every replica.
    fn round(&mut self) {
        self.now_ms += 1;
        let in_flight = std::mem::take(&mut self.in_flight);
        for (from, to, message) in in_flight {
            if self.nodes.contains_key(&to) {
                self.step(to, Input::Message { from, message });
            }
        }
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        if self.auto_sync {
            for &id in &ids {
                self.complete_syncs(id);
            }
        }
        for &id in &ids {
            let restores = std::mem::take(&mut self.nodes.get_mut(&id).expect("node").restores);
            for (meta, data) in restores {
                let tables = Tables::from_snapshot_bytes(&data).map(Box::new);
                self.step(id, Input::SnapshotRestored { meta, tables, data });
            }
        }
        for &id in &ids {
            let reads = std::mem::take(&mut self.nodes.get_mut(&id).expect("node").log_reads);
            for read in reads {
                let log = &self.nodes[&id].log;
                let entries: Vec<Entry> = log
                    .range(read.from..=read.through)
                    .map(|(_, entry)| entry.clone())
                    .collect();
                self.step(
                    id,
                    Input::LogRead {
                        read,
                        entries: Ok(entries),
                    },
                );
            }
        }
        for &id in &ids {
            let written = std::mem::take(&mut self.nodes.get_mut(&id).expect("node").snapshots);
            for (meta, version) in written {
                let data = Bytes::from(version.to_snapshot_bytes());
                self.step(id, Input::SnapshotWritten { meta, data });
            }
        }
        for id in ids {
            self.step(id, Input::Tick);
        }
    }

    fn run_for(&mut self, ms: u64) {
        for _ in 0..ms {
            self.round();
        }
    }

    fn run_until(&mut self, done: impl Fn(&Cluster) -> bool) {
        for _ in 0..ROUNDS_MAX {
            if done(self) {
                return;
            }
            self.round();
        }
        panic!("not done within {ROUNDS_MAX} ms");
    }

    /// The leader that has applied its term's first entry and so serves.
    fn serving_leader(&self) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|(_, n)| n.replica.status().is_leader)
            .map(|(id, _)| *id)
    }

    fn leader(&self) -> NodeId {
        self.serving_leader().expect("a serving leader")
    }

    fn followers(&self) -> Vec<NodeId> {
        let leader = self.leader();
        self.nodes
            .keys()
            .copied()
            .filter(|id| *id != leader)
            .collect()
    }

    /// Every result `id` delivered, with the shard it went to.
    fn results(&self, id: NodeId) -> Vec<(usize, u64, ProposalResult)> {
        let mut out = Vec::new();
        for effect in &self.node(id).effects {
            if let Effect::Deliver { shard, results, .. } = effect {
                for (request_id, result) in results {
                    out.push((*shard, *request_id, result.clone()));
                }
            }
        }
        out
    }

    /// The one result of `request_id` on `id`, if delivered yet; fails if delivered twice.
    fn result_of(&self, id: NodeId, request_id: u64) -> Option<ProposalResult> {
        let mut found: Vec<ProposalResult> = self
            .results(id)
            .into_iter()
            .filter(|(_, r, _)| *r == request_id)
            .map(|(_, _, result)| result)
            .collect();
        assert!(
            found.len() <= 1,
            "request {request_id} answered twice: {found:?}"
        );
        found.pop()
    }

    /// The index of the batch that carried `request_id`'s result.
    fn delivered_with_index(&self, id: NodeId, request_id: u64) -> Option<u64> {
        self.node(id)
            .effects
            .iter()
            .find_map(|effect| match effect {
                Effect::Deliver { batch, results, .. }
                    if results.iter().any(|(r, _)| *r == request_id) =>
                {
                    Some(batch.version.index)
                }
                _ => None,
            })
    }

    fn clear_effects(&mut self) {
        for node in self.nodes.values_mut() {
            node.effects.clear();
        }
    }
}

/// The raft thread's answer to a confirmed read or an operator request carried out.
fn applied_true() -> ProposalResult {
    ProposalResult::Applied(CommandResult::Bool(true))
}

/// The answer to a KV write that happened.
fn kv_written() -> ProposalResult {
    ProposalResult::Applied(CommandResult::Kv(KvResult::Written))
}

#[test]
fn every_ready_is_written_once_and_every_proposal_answered_once() {
    let mut cluster = Cluster::single();
    cluster.clear_effects();
    let ids: Vec<u64> = (0..6)
        .map(|i| request_id(i % SHARDS, 100 + i as u64))
        .collect();
    for (i, &request) in ids.iter().enumerate() {
        cluster.step(
            1,
            Input::Propose {
                request_id: request,
                payload: put(&format!("k{i}"), "v"),
            },
        );
    }
    cluster.run_for(3);
    let mut appended = Vec::new();
    for effect in &cluster.node(1).effects {
        if let Effect::Append { entries, .. } = effect {
            appended.extend(entries.iter().map(|e| e.index));
        }
    }
    assert_eq!(
        appended.len(),
        ids.len(),
        "each entry appended once: {appended:?}"
    );
    assert!(
        appended.windows(2).all(|w| w[1] == w[0] + 1),
        "{appended:?}"
    );
    for &request in &ids {
        assert_eq!(cluster.result_of(1, request), Some(kv_written()));
    }
    let replica = cluster.replica(1);
    assert!(!replica.raft().has_ready(), "a Ready was left behind");
    assert_eq!(replica.tables.index, *appended.last().expect("appended"));
    assert_eq!(replica.pending_proposals(), 0);
}

#[test]
fn results_reach_the_shard_that_asked_and_only_it() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    let follower = cluster.followers()[0];
    cluster.clear_effects();
    let from_shard_2 = request_id(2, 7);
    let from_shard_0 = request_id(0, 7);
    cluster.step(
        leader,
        Input::Propose {
            request_id: from_shard_2,
            payload: put("a", "1"),
        },
    );
    cluster.step(
        leader,
        Input::Propose {
            request_id: from_shard_0,
            payload: put("b", "2"),
        },
    );
    // A follower refuses at once, to the shard that asked.
    let refused = request_id(1, 9);
    cluster.step(
        follower,
        Input::Propose {
            request_id: refused,
            payload: put("c", "3"),
        },
    );
    cluster.run_until(|c| c.result_of(leader, from_shard_0).is_some());
    cluster.run_for(2);
    for (shard, request, result) in cluster.results(leader) {
        assert_eq!(
            shard,
            shard_of_request(request),
            "{request:x} went to shard {shard}"
        );
        assert_eq!(result, kv_written());
    }
    assert_eq!(cluster.result_of(leader, from_shard_2), Some(kv_written()));
    assert_eq!(
        cluster.results(follower),
        vec![(1, refused, ProposalResult::NotLeader)]
    );
}

#[test]
fn the_index_is_published_before_any_shard_is_given_the_batch() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    cluster.clear_effects();
    for i in 0..5 {
        cluster.step(
            leader,
            Input::Propose {
                request_id: request_id(i % SHARDS, i as u64),
                payload: put("k", &i.to_string()),
            },
        );
        cluster.run_for(3);
    }
    cluster.run_for(20);
    for (id, node) in &cluster.nodes {
        let mut published = 0;
        let mut batches = 0;
        for effect in &node.effects {
            match effect {
                Effect::PublishIndex { index } => {
                    assert!(*index >= published, "node {id}: published index went back");
                    published = *index;
                }
                Effect::Deliver { batch, .. } => {
                    assert!(
                        batch.version.index <= published,
                        "node {id}: batch at {} queued while the published index is {published}",
                        batch.version.index
                    );
                    batches += 1;
                }
                _ => {}
            }
        }
        assert!(
            batches >= 5 * SHARDS,
            "node {id}: only {batches} batches delivered"
        );
        assert_eq!(published, node.replica.tables.index);
    }
}

#[test]
fn a_follower_acknowledges_entries_only_after_syncing_them() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    cluster.clear_effects();
    cluster.step(
        leader,
        Input::Propose {
            request_id: request_id(0, 1),
            payload: put("k", "v"),
        },
    );
    cluster.run_until(|c| c.result_of(leader, request_id(0, 1)).is_some());
    for follower in cluster.followers() {
        let effects = &cluster.node(follower).effects;
        let mut appended_at = None;
        let mut synced_after = false;
        let mut acknowledged = false;
        for (position, effect) in effects.iter().enumerate() {
            match effect {
                Effect::Append { entries, .. } if !entries.is_empty() => {
                    appended_at = Some(position);
                    synced_after = false;
                }
                Effect::SyncNow => synced_after = true,
                Effect::SyncInBackground { .. } => panic!("a follower syncs on its thread"),
                Effect::Send {
                    message: Message::AppendResponse { match_index, .. },
                    ..
                } if appended_at.is_some() && *match_index > 0 => {
                    assert!(
                        synced_after,
                        "follower {follower} acknowledged up to {match_index} before syncing"
                    );
                    acknowledged = true;
                }
                _ => {}
            }
        }
        assert!(acknowledged, "follower {follower} never acknowledged");
    }
}

#[test]
fn a_leader_counts_its_own_entries_only_once_the_background_sync_reports() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    cluster.auto_sync = false;
    cluster.complete_syncs(leader);
    // With one follower cut off, the commit needs the leader's own copy.
    cluster.cut.insert(cluster.followers()[1]);
    cluster.clear_effects();
    let write = request_id(0, 1);
    cluster.step(
        leader,
        Input::Propose {
            request_id: write,
            payload: put("k", "v"),
        },
    );
    cluster.run_for(30);
    assert!(
        !cluster.node(leader).background.is_empty(),
        "the leader of three voters syncs in the background"
    );
    assert_eq!(
        cluster.result_of(leader, write),
        None,
        "committed before durable"
    );
    cluster.complete_syncs(leader);
    cluster.run_until(|c| c.result_of(leader, write).is_some());
    assert_eq!(cluster.result_of(leader, write), Some(kv_written()));
}

#[test]
fn a_vote_granted_while_leading_waits_for_the_background_sync() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    let target = cluster.followers()[0];
    cluster.auto_sync = false;
    cluster.complete_syncs(leader);
    cluster.clear_effects();
    cluster.step(
        leader,
        Input::Operator {
            request_id: request_id(0, 1),
            op: OperatorOp::TransferLeader {
                id: Some(format!("server-{target}")),
            },
        },
    );
    // Run until the old leader has written its vote for the target.
    cluster.run_until(|c| {
        c.node(leader).effects.iter().any(
            |e| matches!(e, Effect::Append { hard_state: Some(hs), .. } if hs.vote == Some(target)),
        )
    });
    let voted = |c: &Cluster| {
        c.node(leader).effects.iter().any(|e| {
            matches!(
                e,
                Effect::Send {
                    to,
                    message: Message::VoteResponse { granted: true, pre_vote: false, .. }
                } if *to == target
            )
        })
    };
    let effects = &cluster.node(leader).effects;
    let written = effects
        .iter()
        .position(
            |e| matches!(e, Effect::Append { hard_state: Some(hs), .. } if hs.vote == Some(target)),
        )
        .expect("vote written");
    let synced_inline = effects[written..]
        .iter()
        .any(|e| matches!(e, Effect::SyncNow));
    if synced_inline {
        // The step that wrote the vote also stepped down and synced on its thread: the
        // grant must then come after that sync.
        let sync = written
            + effects[written..]
                .iter()
                .position(|e| matches!(e, Effect::SyncNow))
                .expect("sync");
        let grant = effects.iter().position(|e| {
            matches!(
                e,
                Effect::Send {
                    message: Message::VoteResponse {
                        granted: true,
                        pre_vote: false,
                        ..
                    },
                    ..
                }
            )
        });
        assert!(
            grant.is_none_or(|g| g > sync),
            "vote granted before the sync"
        );
    } else {
        assert!(
            !cluster.node(leader).background.is_empty(),
            "a leader of three writes its vote with a background sync"
        );
        assert!(!voted(&cluster), "vote granted before its sync reported");
        cluster.complete_syncs(leader);
        assert!(voted(&cluster), "vote not granted once durable");
    }
    cluster.auto_sync = true;
    cluster.run_until(|c| c.serving_leader() == Some(target));
    assert_eq!(
        cluster.result_of(leader, request_id(0, 1)),
        Some(applied_true())
    );
}

#[test]
fn a_consistent_read_is_answered_after_the_quorum_round_and_the_apply() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    cluster.clear_effects();
    let write = request_id(0, 1);
    let read = request_id(1, 2);
    cluster.step(
        leader,
        Input::Propose {
            request_id: write,
            payload: put("k", "v"),
        },
    );
    cluster.run_until(|c| c.result_of(leader, write).is_some());
    let write_index = cluster
        .delivered_with_index(leader, write)
        .expect("the write was answered");
    cluster.step(leader, Input::ReadIndex { request_id: read });
    cluster.step(leader, Input::Tick);
    assert_eq!(
        cluster.result_of(leader, read),
        None,
        "answered without a quorum round"
    );
    // The confirmation needs the followers: cut them off and nothing is answered.
    let followers = cluster.followers();
    cluster.cut.extend(followers.iter().copied());
    cluster.run_for(50);
    assert_eq!(
        cluster.result_of(leader, read),
        None,
        "answered without a quorum"
    );
    cluster.cut.clear();
    cluster.run_until(|c| c.result_of(leader, read).is_some());
    assert_eq!(cluster.result_of(leader, read), Some(applied_true()));
    let read_index = cluster
        .delivered_with_index(leader, read)
        .expect("answered");
    assert!(
        read_index >= write_index,
        "the read was answered with version {read_index}, without the write acknowledged at \
         {write_index} before it started"
    );
}

#[test]
fn a_read_on_a_follower_is_refused_as_not_leader() {
    let mut cluster = Cluster::three();
    let follower = cluster.followers()[0];
    cluster.clear_effects();
    cluster.step(follower, Input::ReadIndex { request_id: 5 });
    cluster.step(follower, Input::Tick);
    assert_eq!(
        cluster.result_of(follower, 5),
        Some(ProposalResult::NotLeader)
    );
}

#[test]
fn leadership_loss_turns_in_flight_proposals_into_leadership_lost() {
    let mut cluster = Cluster::three();
    let old = cluster.leader();
    cluster.cut.insert(old);
    cluster.clear_effects();
    let write = request_id(2, 1);
    cluster.step(
        old,
        Input::Propose {
            request_id: write,
            payload: put("k", "lost?"),
        },
    );
    assert_eq!(cluster.replica(old).pending_proposals(), 1);
    // The others elect a new leader; the old one steps down when it notices.
    cluster.run_until(|c| {
        c.nodes
            .iter()
            .any(|(id, n)| *id != old && n.replica.status().is_leader)
            && c.replica(old).role != Role::Leader
    });
    cluster.cut.clear();
    cluster.run_for(100);
    assert_eq!(
        cluster.result_of(old, write),
        Some(ProposalResult::LeadershipLost)
    );
    assert_eq!(cluster.replica(old).pending_proposals(), 0);
    // A proposal to the deposed leader never reaches the log.
    let late = request_id(0, 2);
    cluster.step(
        old,
        Input::Propose {
            request_id: late,
            payload: put("k", "late"),
        },
    );
    cluster.step(old, Input::Tick);
    assert_eq!(
        cluster.result_of(old, late),
        Some(ProposalResult::NotLeader)
    );
}

#[test]
fn commit_only_notices_wait_for_the_commit_notice_delay() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    let delay = cluster
        .replica(leader)
        .raft()
        .config()
        .commit_notice_delay_ms;
    // Just after a heartbeat, so that the next one is far away.
    cluster.run_until(|c| {
        c.in_flight.iter().any(|(from, _, m)| {
            *from == leader
                && matches!(m, Message::AppendEntries { entries, .. } if entries.is_empty())
        })
    });
    cluster.run_for(2);
    let write = request_id(0, 1);
    cluster.step(
        leader,
        Input::Propose {
            request_id: write,
            payload: put("k", "v"),
        },
    );
    cluster.run_until(|c| c.result_of(leader, write).is_some());
    let committed_at = cluster.now_ms;
    let commit = cluster.replica(leader).raft().commit_index();
    let notices = |c: &Cluster| {
        c.node(leader)
            .effects
            .iter()
            .filter(|e| {
                matches!(e, Effect::Send { message: Message::AppendEntries { entries, leader_commit, .. }, .. }
                    if entries.is_empty() && *leader_commit >= commit)
            })
            .count()
    };
    while cluster.now_ms < committed_at + delay - 1 {
        cluster.round();
        assert_eq!(
            notices(&cluster),
            0,
            "a commit notice {} ms after the commit",
            cluster.now_ms - committed_at
        );
    }
    cluster.run_for(2);
    assert_eq!(
        notices(&cluster),
        2,
        "one notice per follower after the delay"
    );
}

fn register_node(name: &str) -> Bytes {
    Bytes::from(
        Command::Catalog(CatalogOp::Register(Box::new(Registration {
            node: name.into(),
            address: "10.0.0.9".into(),
            ..Default::default()
        })))
        .encode(),
    )
}

fn create_session(id: &str, node: &str, ttl: &str) -> Bytes {
    Bytes::from(
        Command::Session(SessionOp::Create(Box::new(Session {
            id: Arc::from(id),
            name: String::new(),
            node: node.into(),
            lock_delay_ns: 0,
            behavior: Behavior::Release,
            ttl: ttl.into(),
            node_checks: Some(Vec::new()),
            service_checks: None,
            checks: Vec::new(),
            create_index: 0,
            modify_index: 0,
        })))
        .encode(),
    )
}

#[test]
fn session_ttls_run_on_the_leader_only_and_restart_with_a_new_leader() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    let writes = [
        (
            register_node("n1"),
            CommandResult::Catalog(CatalogResult::Written),
        ),
        (
            create_session("s1", "n1", "10s"),
            CommandResult::Session(SessionResult::Created),
        ),
    ];
    for (sequence, (payload, answer)) in writes.into_iter().enumerate() {
        let request = request_id(0, sequence as u64);
        cluster.step(
            leader,
            Input::Propose {
                request_id: request,
                payload,
            },
        );
        cluster.run_until(|c| c.result_of(leader, request).is_some());
        assert_eq!(
            cluster.result_of(leader, request),
            Some(ProposalResult::Applied(answer))
        );
    }
    let created_at = cluster.now_ms;
    cluster.run_for(5);
    assert_eq!(cluster.replica(leader).session_timers.len(), 1);
    for follower in cluster.followers() {
        assert!(
            cluster.replica(follower).session_timers.is_empty(),
            "follower {follower} keeps a session timer"
        );
        assert!(crate::store::session::get(&cluster.replica(follower).tables, "s1").is_some());
    }
    // Halfway, leadership moves: the new leader's timer runs a full 2 × TTL from then.
    cluster.run_for(10_000);
    let target = cluster.followers()[0];
    cluster.step(
        leader,
        Input::Operator {
            request_id: request_id(0, 9),
            op: OperatorOp::TransferLeader {
                id: Some(format!("server-{target}")),
            },
        },
    );
    cluster.run_until(|c| c.serving_leader() == Some(target));
    let elected_at = cluster.now_ms;
    assert!(cluster.replica(leader).session_timers.is_empty());
    cluster.run_until(|c| c.now_ms >= created_at + 20_500);
    for id in 1..=3 {
        assert!(
            crate::store::session::get(&cluster.replica(id).tables, "s1").is_some(),
            "node {id}: the session expired on the old leader's timer"
        );
    }
    cluster.run_until(|c| {
        (1..=3).all(|id| crate::store::session::get(&c.replica(id).tables, "s1").is_none())
    });
    assert!(
        cluster.now_ms >= elected_at + 20_000,
        "destroyed {} ms after the election, before 2 × TTL",
        cluster.now_ms - elected_at
    );
}

#[test]
fn the_leader_reaps_tombstones_after_their_ttl() {
    let mut cluster = Cluster::single();
    let delete = Bytes::from(Command::Kv(KvOp::Delete { key: "k".into() }).encode());
    for (sequence, payload) in [put("k", "v"), delete].into_iter().enumerate() {
        let request = request_id(0, sequence as u64);
        cluster.step(
            1,
            Input::Propose {
                request_id: request,
                payload,
            },
        );
        cluster.run_until(|c| c.result_of(1, request).is_some());
    }
    assert_eq!(cluster.replica(1).tables.kv.tombstones.len(), 1);
    let deleted_at = cluster.now_ms;
    // Coarse steps: a lone voter needs no heartbeats.
    let step_ms = 1_000;
    while cluster.now_ms < deleted_at + TOMBSTONE_TTL_MS {
        cluster.now_ms += step_ms;
        cluster.step(1, Input::Tick);
        assert_eq!(
            cluster.replica(1).tables.kv.tombstones.len(),
            1,
            "reaped {} ms after the delete",
            cluster.now_ms - deleted_at
        );
    }
    for _ in 0..(2 * TOMBSTONE_GRANULARITY_MS / step_ms + 2) {
        cluster.now_ms += step_ms;
        cluster.step(1, Input::Tick);
    }
    assert!(
        cluster.replica(1).tables.kv.tombstones.is_empty(),
        "not reaped"
    );
}

#[test]
fn a_snapshot_from_the_leader_is_stored_only_after_the_log_above_it_is_cut() {
    let mut cluster = Cluster::three_with(|config| {
        config.snapshot_threshold_entries = 8;
        config.raft.trailing_entries = 0;
    });
    let leader = cluster.leader();
    let lagging = cluster.followers()[0];
    cluster.cut.insert(lagging);
    for i in 0..20u64 {
        let request = request_id(0, i);
        cluster.step(
            leader,
            Input::Propose {
                request_id: request,
                payload: put("k", &i.to_string()),
            },
        );
        cluster.run_until(|c| c.result_of(leader, request).is_some());
    }
    cluster.run_for(50);
    assert!(cluster.replica(leader).raft().snapshot_index() > 8);
    cluster.clear_effects();
    cluster.cut.clear();
    cluster.run_until(|c| c.replica(lagging).tables.index >= c.replica(leader).tables.index);
    let effects = &cluster.node(lagging).effects;
    let stored = effects
        .iter()
        .position(|e| matches!(e, Effect::InstallSnapshot { .. }))
        .expect("the lagging follower was sent a snapshot");
    let Effect::InstallSnapshot { meta } = &effects[stored] else {
        unreachable!("found above");
    };
    let cut = effects[..stored]
        .iter()
        .rposition(|e| {
            matches!(e, Effect::Append { truncate_from: Some(from), .. } if *from == meta.last_index + 1)
        })
        .expect("the log above the snapshot is cut first");
    assert!(
        effects[cut..stored]
            .iter()
            .any(|e| matches!(e, Effect::SyncNow)),
        "the cut is durable before the snapshot is stored"
    );
    assert_eq!(
        kv_value(&cluster.replica(lagging).tables, "k"),
        Some("19".to_string())
    );
}

fn kv_value(tables: &Tables, key: &str) -> Option<String> {
    crate::store::kv::get(tables, key)
        .1
        .map(|entry| String::from_utf8_lossy(entry.value()).into_owned())
}

#[test]
fn a_single_server_whose_first_write_tore_after_its_hard_state_bootstraps_again() {
    let mut cluster = Cluster::new();
    let torn = Recovered {
        hard_state: crate::raft::HardState {
            term: 1,
            vote: None,
            commit: 0,
        },
        entries: Vec::new(),
        snapshot: None,
    };
    let replica = Replica::open(config(1, true, 0), torn, 7, at(cluster.now_ms))
        .expect("a torn first write opens");
    cluster.nodes.insert(
        1,
        Node {
            replica,
            effects: Vec::new(),
            background: Vec::new(),
            snapshots: Vec::new(),
            log: BTreeMap::new(),
            log_reads: Vec::new(),
            incoming: None,
            restores: Vec::new(),
        },
    );
    cluster.step(1, Input::Start);
    cluster.run_until(|c| c.serving_leader() == Some(1));
}

#[test]
fn an_undecodable_committed_entry_stops_the_replica() {
    let mut cluster = Cluster::single();
    cluster.step(
        1,
        Input::Propose {
            request_id: 1,
            payload: Bytes::from_static(b"\xffnot a command"),
        },
    );
    let replica = &mut cluster.nodes.get_mut(&1).expect("node").replica;
    let fatal = replica
        .step(at(cluster.now_ms + 1), Input::Tick)
        .expect_err("applying garbage is fatal");
    assert!(fatal.what.contains("undecodable command"), "{fatal}");
}

#[test]
#[should_panic(expected = "reported but only")]
fn a_sync_report_beyond_what_was_requested_is_caught() {
    let mut cluster = Cluster::single();
    cluster.step(1, Input::Synced { through: 1_000_000 });
}

#[test]
fn operator_requests_answer_with_consuls_words() {
    let mut cluster = Cluster::three();
    let leader = cluster.leader();
    let follower = cluster.followers()[0];
    cluster.step(
        leader,
        Input::Operator {
            request_id: 1,
            op: OperatorOp::RemovePeer {
                id: None,
                address: Some("10.9.9.9:8300".into()),
            },
        },
    );
    cluster.step(
        leader,
        Input::Operator {
            request_id: 2,
            op: OperatorOp::RenewSession { id: "nope".into() },
        },
    );
    cluster.step(
        follower,
        Input::Operator {
            request_id: 3,
            op: OperatorOp::RenewSession { id: "nope".into() },
        },
    );
    cluster.run_for(1);
    assert_eq!(
        cluster.result_of(leader, 1),
        Some(ProposalResult::Applied(CommandResult::Error(
            "address \"10.9.9.9:8300\" was not found in the Raft configuration".into()
        )))
    );
    assert_eq!(
        cluster.result_of(leader, 2),
        Some(ProposalResult::Applied(CommandResult::Bool(false)))
    );
    assert_eq!(
        cluster.result_of(follower, 3),
        Some(ProposalResult::NotLeader)
    );
}

/// Autopilot settings for the tests: a short stabilization time.
fn quick_autopilot(config: &mut ReplicaConfig) {
    config.autopilot.server_stabilization_time_ns = 2_000_000_000;
}

/// Every replica hears the same view of the servers from gossip.
fn gossip(cluster: &mut Cluster, servers: &[ServerInfo]) {
    let ids: Vec<NodeId> = cluster.nodes.keys().copied().collect();
    for id in ids {
        cluster.step(id, Input::Servers(servers.to_vec()));
    }
}

fn member_voter(cluster: &Cluster, id: NodeId) -> Option<bool> {
    let leader = cluster.serving_leader()?;
    cluster
        .replica(leader)
        .raft()
        .membership()
        .members
        .get(&id)
        .map(|m| m.voter)
}

#[test]
fn a_joining_server_votes_only_after_the_stabilization_time() {
    let mut cluster = Cluster::three_with(quick_autopilot);
    let leader = cluster.leader();
    // The first leader wrote the configured autopilot settings.
    cluster.run_until(|c| c.replica(leader).version().autopilot.is_some());
    let written = cluster.replica(leader).version().autopilot.clone().unwrap();
    assert_eq!(written.server_stabilization_time_ns, 2_000_000_000);
    let mut fourth = config(4, false, 0);
    quick_autopilot(&mut fourth);
    cluster.add(4, fourth);
    let mut servers: Vec<ServerInfo> = (1..=3).map(|id| server(id, 3)).collect();
    servers.push(server(4, 0));
    gossip(&mut cluster, &servers);
    cluster.run_until(|c| member_voter(c, 4).is_some());
    assert_eq!(
        member_voter(&cluster, 4),
        Some(false),
        "joins as a non-voter"
    );
    let added_ms = cluster.now_ms;
    cluster.run_until(|c| {
        let health = c.replica(c.leader()).status().autopilot.clone();
        health.is_some_and(|h| h.servers.iter().any(|s| s.raft_id == 4 && s.healthy))
    });
    let health = cluster.replica(leader).status().autopilot.clone().unwrap();
    let newcomer = health.servers.iter().find(|s| s.raft_id == 4).unwrap();
    assert!(!newcomer.voter && !newcomer.stable);
    cluster.run_until(|c| member_voter(c, 4) == Some(true));
    let waited_ms = cluster.now_ms - added_ms;
    assert!(
        waited_ms >= 2_000,
        "promoted after {waited_ms} ms, before the 2 s stabilization time"
    );
    cluster.run_until(|c| {
        c.replica(c.leader())
            .status()
            .autopilot
            .as_ref()
            .is_some_and(|h| h.healthy && h.servers.len() == 4)
    });
    let health = cluster
        .replica(cluster.leader())
        .status()
        .autopilot
        .clone()
        .unwrap();
    // Four healthy voters, quorum three: one may fail.
    assert_eq!(health.failure_tolerance, 1);
}

#[test]
fn dead_servers_go_while_a_majority_and_min_quorum_remain() {
    let mut cluster = Cluster::bootstrapped(5, quick_autopilot);
    let leader = cluster.leader();
    let dead: Vec<NodeId> = cluster.followers().into_iter().take(3).collect();
    // Three of five fail: removing them all would leave no majority of the five, so at
    // most two go — and with only two survivors the removals cannot commit anyway. Two
    // failing is the case autopilot handles.
    let failing = &dead[..2];
    for id in failing {
        cluster.cut.insert(*id);
    }
    let servers: Vec<ServerInfo> = (1..=5)
        .map(|id| ServerInfo {
            alive: !failing.contains(&id),
            ..server(id, 5)
        })
        .collect();
    gossip(&mut cluster, &servers);
    cluster.run_until(|c| {
        let members = &c.replica(leader).raft().membership().members;
        members.len() == 3 && failing.iter().all(|id| !members.contains_key(id))
    });
    assert!(cluster.replica(leader).status().is_leader);
}

#[test]
fn min_quorum_and_the_cleanup_switch_keep_dead_servers() {
    for (min_quorum, cleanup) in [(5, true), (0, false)] {
        let mut cluster = Cluster::bootstrapped(5, |config| {
            quick_autopilot(config);
            config.autopilot.min_quorum = min_quorum;
            config.autopilot.cleanup_dead_servers = cleanup;
        });
        let leader = cluster.leader();
        let failing = cluster.followers()[0];
        cluster.cut.insert(failing);
        let servers: Vec<ServerInfo> = (1..=5)
            .map(|id| ServerInfo {
                alive: id != failing,
                ..server(id, 5)
            })
            .collect();
        gossip(&mut cluster, &servers);
        cluster.run_for(DEAD_SERVER_GRACE_MS + 5_000);
        let members = &cluster.replica(leader).raft().membership().members;
        assert_eq!(
            members.len(),
            5,
            "min_quorum {min_quorum}, cleanup {cleanup}"
        );
        let health = cluster.replica(leader).status().autopilot.clone().unwrap();
        assert!(!health.healthy);
        let failed = health
            .servers
            .iter()
            .find(|s| s.raft_id == failing)
            .unwrap();
        assert_eq!(failed.serf_status, "failed");
        assert!(!failed.healthy);
        // Four healthy voters of five, quorum three.
        assert_eq!(health.failure_tolerance, 1);
    }
}

/// Gossip's view with the servers in `failed` failed and the others alive, for servers
/// `1..=n` expecting `n`.
fn gossip_failed(cluster: &mut Cluster, n: u64, failed: &[NodeId]) {
    let servers: Vec<ServerInfo> = (1..=n)
        .map(|id| ServerInfo {
            alive: !failed.contains(&id),
            ..server(id, n as u32)
        })
        .collect();
    gossip(cluster, &servers);
}

fn voters_of(cluster: &Cluster) -> Vec<NodeId> {
    let leader = cluster.leader();
    cluster
        .replica(leader)
        .raft()
        .membership()
        .voters()
        .collect()
}

#[test]
fn a_dead_server_keeps_its_vote_through_the_grace_and_after_it_comes_back() {
    let mut cluster = Cluster::three_with(quick_autopilot);
    let victim = cluster.followers()[0];
    cluster.cut.insert(victim);
    gossip_failed(&mut cluster, 3, &[victim]);
    // Killed, paused or partitioned for most of the grace: still a voter.
    cluster.run_for(DEAD_SERVER_GRACE_MS - 2_000);
    assert_eq!(voters_of(&cluster).len(), 3);
    let health = cluster
        .replica(cluster.leader())
        .status()
        .autopilot
        .clone()
        .unwrap();
    assert_eq!(health.failure_tolerance, 0, "two healthy voters of three");
    // It comes back: gossip and Raft reach it again, the count starts over.
    cluster.cut.remove(&victim);
    gossip_failed(&mut cluster, 3, &[]);
    cluster.run_for(3_000);
    cluster.cut.insert(victim);
    gossip_failed(&mut cluster, 3, &[victim]);
    cluster.run_for(DEAD_SERVER_GRACE_MS - 2_000);
    assert_eq!(voters_of(&cluster).len(), 3, "the grace started over");
    // Dead past the grace: removed.
    cluster.run_until(|c| !c.replica(c.leader()).raft().membership().contains(victim));
    assert_eq!(voters_of(&cluster).len(), 2);
}

#[test]
fn a_server_gossip_calls_failed_but_raft_reaches_keeps_its_vote() {
    // Gossip's verdict lags behind a healed partition; the leader hears the server, so it
    // is not dead however long gossip says so.
    let mut cluster = Cluster::three_with(quick_autopilot);
    let victim = cluster.followers()[0];
    gossip_failed(&mut cluster, 3, &[victim]);
    cluster.run_for(DEAD_SERVER_GRACE_MS + 5_000);
    assert_eq!(voters_of(&cluster).len(), 3);
}

#[test]
fn a_pass_takes_at_most_half_the_voters_less_one_and_never_below_min_quorum() {
    for (min_quorum, dead, planned) in [(0, 3, 2), (4, 3, 1), (5, 2, 0), (0, 1, 1)] {
        let cluster = Cluster::bootstrapped(5, |config| {
            quick_autopilot(config);
            config.autopilot.min_quorum = min_quorum;
        });
        let dead: Vec<NodeId> = cluster.followers().into_iter().take(dead).collect();
        let pass = cluster.replica(cluster.leader()).plan_pass(&dead);
        assert_eq!(
            pass.len(),
            planned,
            "min_quorum {min_quorum}, {dead:?} dead"
        );
        assert!(pass.iter().all(|id| dead.contains(id)));
    }
}

#[test]
fn two_voters_and_a_returning_non_voter_keep_both_votes() {
    // Three servers; one dies for good and is removed: two voters.
    let mut cluster = Cluster::three_with(quick_autopilot);
    let first = cluster.followers()[0];
    cluster.cut.insert(first);
    gossip_failed(&mut cluster, 3, &[first]);
    cluster.run_until(|c| !c.replica(c.leader()).raft().membership().contains(first));
    // It comes back and rejoins as a non-voter. Before its promotion, gossip calls the
    // other voter failed while Raft still reaches it (the second removal, which
    // left one voter): (2 − 1) / 2 = 0 voters may go, and it is not dead anyway.
    cluster.cut.remove(&first);
    gossip_failed(&mut cluster, 3, &[]);
    cluster.run_until(|c| member_voter(c, first) == Some(false));
    let leader = cluster.leader();
    let second = cluster
        .followers()
        .into_iter()
        .find(|id| *id != first)
        .unwrap();
    gossip_failed(&mut cluster, 3, &[second]);
    cluster.run_for(DEAD_SERVER_GRACE_MS + 5_000);
    let membership = cluster.replica(leader).raft().membership();
    assert!(membership.members[&second].voter, "the second voter stays");
    assert_eq!(cluster.serving_leader(), Some(leader));
}

#[test]
fn a_server_waiting_to_join_lets_a_dead_server_go_at_once() {
    let mut cluster = Cluster::three_with(quick_autopilot);
    let victim = cluster.followers()[0];
    cluster.cut.insert(victim);
    let mut fourth = config(4, false, 0);
    quick_autopilot(&mut fourth);
    cluster.add(4, fourth);
    let mut servers: Vec<ServerInfo> = (1..=3)
        .map(|id| ServerInfo {
            alive: id != victim,
            ..server(id, 3)
        })
        .collect();
    servers.push(server(4, 0));
    let started_ms = cluster.now_ms;
    gossip(&mut cluster, &servers);
    cluster.run_until(|c| {
        let members = &c.replica(c.leader()).raft().membership().members;
        !members.contains_key(&victim) && members.contains_key(&4)
    });
    assert!(
        cluster.now_ms - started_ms < DEAD_SERVER_GRACE_MS,
        "replaced after {} ms",
        cluster.now_ms - started_ms
    );
    cluster.run_until(|c| member_voter(c, 4) == Some(true));
}

/// Runs for `ms` and answers the fewest voters the leader's configuration held meanwhile
/// (read whenever a serving leader is known).
fn run_counting_voters(cluster: &mut Cluster, ms: u64) -> usize {
    let mut fewest = usize::MAX;
    for _ in 0..ms {
        cluster.round();
        if let Some(leader) = cluster.serving_leader() {
            let voters = cluster.replica(leader).raft().membership().voters().count();
            fewest = fewest.min(voters);
        }
    }
    fewest
}

#[test]
fn a_partitioned_server_keeps_its_vote_and_a_removed_one_votes_again_after_stabilization() {
    for n in [3, 5] {
        let mut cluster = Cluster::bootstrapped(n, quick_autopilot);
        let victim = cluster.followers()[0];
        // Partitioned for seconds, gossip calling it failed: it keeps its vote, and once
        // healed it is a healthy voter again without a configuration change.
        cluster.cut.insert(victim);
        gossip_failed(&mut cluster, n, &[victim]);
        let fewest = run_counting_voters(&mut cluster, 10_000);
        assert_eq!(fewest, n as usize, "{n} servers: a partition cost a vote");
        cluster.cut.remove(&victim);
        gossip_failed(&mut cluster, n, &[]);
        let fewest = run_counting_voters(&mut cluster, 3_000);
        assert_eq!(
            fewest, n as usize,
            "{n} servers: the healed server lost its vote"
        );
        assert_eq!(member_voter(&cluster, victim), Some(true));
        // Partitioned past the grace: removed, and only it.
        cluster.cut.insert(victim);
        gossip_failed(&mut cluster, n, &[victim]);
        cluster.run_until(|c| member_voter(c, victim).is_none());
        assert_eq!(voters_of(&cluster).len(), n as usize - 1);
        // Healed: it joins as a non-voter and votes once healthy for the stabilization
        // time (2 s here), never before.
        cluster.cut.remove(&victim);
        gossip_failed(&mut cluster, n, &[]);
        cluster.run_until(|c| member_voter(c, victim) == Some(false));
        let joined_ms = cluster.now_ms;
        cluster.run_until(|c| member_voter(c, victim) == Some(true));
        assert!(
            cluster.now_ms - joined_ms >= 2_000,
            "{n} servers: promoted {} ms after it joined",
            cluster.now_ms - joined_ms
        );
        assert_eq!(voters_of(&cluster).len(), n as usize);
    }
}

#[test]
fn five_servers_lose_only_dead_servers_and_never_their_majority() {
    // Gossip calls two followers failed; one is cut off, the other still reaches the
    // leader (gossip lags): only the cut-off one goes.
    let mut cluster = Cluster::bootstrapped(5, quick_autopilot);
    let followers = cluster.followers();
    let (dead, alive) = (followers[0], followers[1]);
    cluster.cut.insert(dead);
    gossip_failed(&mut cluster, 5, &[dead, alive]);
    let fewest = run_counting_voters(&mut cluster, DEAD_SERVER_GRACE_MS + 5_000);
    assert_eq!(member_voter(&cluster, dead), None, "the dead server goes");
    assert_eq!(
        member_voter(&cluster, alive),
        Some(true),
        "the reachable one stays"
    );
    assert_eq!(fewest, 4);
    // Three of five die together: at most (5 − 1) / 2 = 2 could go in one pass, and with
    // two survivors no removal can commit; never below a majority of the configuration.
    let mut cluster = Cluster::bootstrapped(5, quick_autopilot);
    let leader = cluster.leader();
    let dying: Vec<NodeId> = cluster.followers().into_iter().take(3).collect();
    cluster.cut.extend(dying.iter().copied());
    gossip_failed(&mut cluster, 5, &dying);
    cluster.run_for(DEAD_SERVER_GRACE_MS + 5_000);
    let voters = cluster.replica(leader).raft().membership().voters().count();
    assert!(voters >= 3, "{voters} voters left of five");
}
