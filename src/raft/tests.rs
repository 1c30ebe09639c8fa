//! Unit tests, one group per mechanism, over a tiny synchronous test network: persistence
//! is instantaneous, messages are delivered in order unless a link is cut or a test holds
//! them back. The seeded simulator (`tests/sim`) covers faults and interleavings.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use super::*;

const ELECTION_MS: Millis = 1000;

fn test_config(id: NodeId) -> RaftConfig {
    let mut config = RaftConfig::new(id);
    config.election_timeout_ms = ELECTION_MS;
    config.heartbeat_interval_ms = 100;
    config.lease_ms = 900;
    config
}

fn voters(ids: &[NodeId]) -> Membership {
    let mut members = BTreeMap::new();
    for &id in ids {
        members.insert(
            id,
            Member {
                voter: true,
                name: format!("n{id}"),
                address: format!("10.0.0.{id}:8300"),
            },
        );
    }
    Membership { members }
}

/// One server of the test network with an instantly durable "disk".
struct TestNode {
    core: RaftCore,
    durable_entries: Vec<Entry>,
    hard_state: HardState,
    applied: Vec<Entry>,
    read_states: Vec<ReadState>,
    snapshots_received: usize,
    /// Reads of the durable log the core asked for.
    log_reads: usize,
    /// The snapshot being assembled from the pieces received, and the last one installed.
    incoming: Vec<u8>,
    installed: Vec<u8>,
}

/// What a driver's durable log answers to `read` (see `Ready::log_reads`).
fn read_durable(durable: &[Entry], read: LogRead) -> Result<Vec<Entry>, String> {
    let start = durable
        .iter()
        .position(|e| e.index == read.from)
        .ok_or_else(|| format!("entry {} is not in the durable log", read.from))?;
    let mut out = Vec::new();
    let mut bytes = 0;
    for entry in durable[start..]
        .iter()
        .take_while(|e| e.index <= read.through)
    {
        if !out.is_empty() && bytes + entry.size_bytes() > read.bytes_max {
            break;
        }
        bytes += entry.size_bytes();
        out.push(entry.clone());
    }
    Ok(out)
}

struct TestNet {
    nodes: BTreeMap<NodeId, TestNode>,
    now: Millis,
    queue: VecDeque<(NodeId, NodeId, Message)>,
    /// Directed links (from, to) that drop everything.
    cut: BTreeSet<(NodeId, NodeId)>,
    /// When set, messages are queued but `settle` does not deliver them.
    hold: bool,
}

impl TestNet {
    fn new(ids: &[NodeId], bootstrap: &[NodeId], configure: impl Fn(&mut RaftConfig)) -> Self {
        let mut nodes = BTreeMap::new();
        for &id in ids {
            let mut config = test_config(id);
            configure(&mut config);
            let mut core = RaftCore::new(config, Restored::default(), 7, 0);
            if !bootstrap.is_empty() && bootstrap.contains(&id) {
                core.bootstrap(voters(bootstrap)).unwrap();
            }
            nodes.insert(
                id,
                TestNode {
                    core,
                    durable_entries: Vec::new(),
                    hard_state: HardState::default(),
                    applied: Vec::new(),
                    read_states: Vec::new(),
                    snapshots_received: 0,
                    log_reads: 0,
                    incoming: Vec::new(),
                    installed: Vec::new(),
                },
            );
        }
        TestNet {
            nodes,
            now: 0,
            queue: VecDeque::new(),
            cut: BTreeSet::new(),
            hold: false,
        }
    }

    fn core(&self, id: NodeId) -> &RaftCore {
        &self.nodes[&id].core
    }

    fn core_mut(&mut self, id: NodeId) -> &mut RaftCore {
        &mut self.nodes.get_mut(&id).unwrap().core
    }

    /// Processes every node's Ready once; returns whether anything happened.
    fn drain_readies(&mut self) -> bool {
        let mut any = false;
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let now = self.now;
            let node = self.nodes.get_mut(&id).unwrap();
            while node.core.has_ready() {
                any = true;
                let ready = node.core.ready();
                let done = ready.done();
                for chunk in &ready.snapshot_chunks {
                    if chunk.meta.is_some() {
                        node.incoming.clear();
                    }
                    assert_eq!(chunk.offset, node.incoming.len() as u64, "pieces in order");
                    node.incoming.extend_from_slice(&chunk.data);
                }
                if let Some(meta) = &ready.snapshot {
                    node.installed = std::mem::take(&mut node.incoming);
                    node.durable_entries.clear();
                    node.snapshots_received += 1;
                    node.applied.retain(|e| e.index <= meta.last_index);
                }
                if let Some(from) = ready.truncate_from {
                    node.durable_entries.retain(|e| e.index < from);
                }
                node.durable_entries.extend(ready.entries.iter().cloned());
                if let Some(hs) = ready.hard_state {
                    node.hard_state = hs;
                }
                node.applied.extend(ready.committed.iter().cloned());
                node.read_states.extend(ready.read_states.iter().copied());
                for (to, m) in ready
                    .messages
                    .into_iter()
                    .chain(ready.messages_after_persist)
                {
                    self.queue.push_back((id, to, m));
                }
                node.core.advance(now, done);
                for read in ready.log_reads {
                    node.log_reads += 1;
                    let entries = read_durable(&node.durable_entries, read);
                    node.core.log_read_done(now, read, entries);
                }
            }
        }
        any
    }

    /// Delivers messages and handles Readys until nothing moves (or `hold` is set).
    fn settle(&mut self) {
        for _ in 0..100_000 {
            let moved = self.drain_readies();
            if self.hold {
                return;
            }
            match self.queue.pop_front() {
                Some((from, to, message)) if !self.cut.contains(&(from, to)) => {
                    if let Some(node) = self.nodes.get_mut(&to) {
                        node.core.step(self.now, from, message);
                    }
                }
                Some(_) => {}
                None if !moved => return,
                None => {}
            }
        }
        panic!("test network did not settle");
    }

    /// Advances time in `step_ms` increments, ticking every node and settling each time.
    fn run_for(&mut self, duration_ms: Millis, step_ms: Millis) {
        let end = self.now + duration_ms;
        while self.now < end {
            self.now += step_ms;
            let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
            for id in ids {
                let now = self.now;
                self.core_mut(id).tick(now);
            }
            self.settle();
        }
    }

    /// With `hold` set: delivers queued messages one by one until `stop` matches the queue.
    fn deliver_until(&mut self, stop: impl Fn(&VecDeque<(NodeId, NodeId, Message)>) -> bool) {
        assert!(self.hold);
        for _ in 0..10_000 {
            self.drain_readies();
            if stop(&self.queue) {
                return;
            }
            let (from, to, message) = self.queue.pop_front().expect("queue ran dry");
            if !self.cut.contains(&(from, to)) {
                let now = self.now;
                self.core_mut(to).step(now, from, message);
            }
        }
        panic!("condition never reached");
    }

    fn leaders(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.core.role() == Role::Leader)
            .map(|(id, _)| *id)
            .collect()
    }

    fn the_leader(&self) -> NodeId {
        let leaders = self.leaders();
        assert_eq!(
            leaders.len(),
            1,
            "expected exactly one leader, got {leaders:?}"
        );
        leaders[0]
    }

    fn isolate(&mut self, id: NodeId) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for other in ids {
            if other != id {
                self.cut.insert((id, other));
                self.cut.insert((other, id));
            }
        }
    }

    fn heal(&mut self) {
        self.cut.clear();
    }

    fn applied_data(&self, id: NodeId) -> Vec<Bytes> {
        self.nodes[&id]
            .applied
            .iter()
            .filter(|e| e.kind == EntryKind::Normal)
            .map(|e| e.data.clone())
            .collect()
    }

    /// Proposes on the leader and settles.
    fn write(&mut self, data: &'static str) -> (LogIndex, Term) {
        let leader = self.the_leader();
        let now = self.now;
        let at = self
            .core_mut(leader)
            .propose(now, Bytes::from_static(data.as_bytes()))
            .unwrap();
        self.settle();
        at
    }
}

fn elected_three() -> TestNet {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |_| {});
    net.run_for(3 * ELECTION_MS, 10);
    net.the_leader();
    net
}

// ----- bootstrap and the single-voter group ----------------------------------------------

#[test]
fn single_voter_leads_at_once_and_commits_when_persisted() {
    let mut config = test_config(1);
    config.election_timeout_ms = 1000;
    let mut core = RaftCore::new(config, Restored::default(), 1, 0);
    core.bootstrap(voters(&[1])).unwrap();
    core.tick(1);
    assert_eq!(core.role(), Role::Leader);
    let ready = core.ready();
    assert_eq!(
        ready.entries.len(),
        2,
        "bootstrap membership entry and the leader's noop"
    );
    assert!(
        ready.committed.is_empty(),
        "nothing commits before it is durable"
    );
    assert_eq!(ready.role_changed.unwrap().role, Role::Leader);
    let (index, term) = core.propose(2, Bytes::from_static(b"x")).unwrap();
    assert_eq!((index, term), (3, 2));
    // Not persisted yet: nothing committed.
    assert_eq!(core.commit_index(), 0);
    core.advance(2, ready.done());
    assert_eq!(core.commit_index(), 2);
    let ready = core.ready();
    assert_eq!(ready.entries.len(), 1);
    assert_eq!(ready.committed.len(), 2);
    core.advance(3, ready.done());
    assert_eq!(core.commit_index(), 3);
    let ready = core.ready();
    assert_eq!(
        ready.committed.last().unwrap().data,
        Bytes::from_static(b"x")
    );
    core.advance(3, ready.done());
    assert!(!core.has_ready());
    // A read needs no quorum round.
    core.read_index(4, 99).unwrap();
    let ready = core.ready();
    assert_eq!(
        ready.read_states,
        vec![ReadState {
            context: 99,
            index: 3
        }]
    );
    assert_eq!(core.leader_lease_until(), Some(Millis::MAX));
}

#[test]
fn bootstrap_refuses_a_used_server_and_an_empty_membership() {
    let mut core = RaftCore::new(test_config(1), Restored::default(), 1, 0);
    assert!(matches!(
        core.bootstrap(Membership::default()),
        Err(RaftError::InvalidMembership(_))
    ));
    core.bootstrap(voters(&[1, 2, 3])).unwrap();
    assert_eq!(core.bootstrap(voters(&[1])), Err(RaftError::NotPristine));
}

#[test]
fn bootstrap_again_after_a_torn_first_write_kept_only_the_hard_state() {
    let restored = Restored {
        hard_state: HardState {
            term: 2,
            vote: Some(1),
            commit: 0,
        },
        snapshot: None,
        entries: vec![],
    };
    let mut core = RaftCore::new(test_config(1), restored, 1, 0);
    core.bootstrap(voters(&[1])).unwrap();
    assert_eq!(core.term(), 2);
    core.tick(1);
    assert_eq!(core.role(), Role::Leader);
    assert_eq!(core.term(), 3);
}

#[test]
fn restart_restores_log_term_and_commit() {
    let mut net = elected_three();
    net.write("a");
    net.write("b");
    let node = &net.nodes[&2];
    let restored = Restored {
        hard_state: node.hard_state,
        snapshot: None,
        entries: node.durable_entries.clone(),
    };
    let mut core = RaftCore::new(test_config(2), restored, 3, net.now);
    assert_eq!(core.term(), node.core.term());
    assert_eq!(core.last_index(), node.core.last_index());
    assert_eq!(core.membership(), &voters(&[1, 2, 3]));
    let ready = core.ready();
    let applied: Vec<_> = ready.committed.iter().map(|e| e.index).collect();
    assert_eq!(applied, (1..=node.hard_state.commit).collect::<Vec<_>>());
}

#[test]
fn invalid_config_and_restored_state_are_errors() {
    let mut config = test_config(1);
    config.lease_ms = config.election_timeout_ms;
    assert!(matches!(
        RaftCore::try_new(config, Restored::default(), 1, 0),
        Err(RaftError::InvalidConfig(_))
    ));
    let gap = Restored {
        hard_state: HardState::default(),
        snapshot: None,
        entries: vec![Entry {
            index: 2,
            term: 1,
            kind: EntryKind::Normal,
            data: Bytes::new(),
        }],
    };
    assert!(matches!(
        RaftCore::try_new(test_config(1), gap, 1, 0),
        Err(RaftError::InvalidRestoredState(_))
    ));
}

// ----- election ------------------------------------------------------------------------

#[test]
fn three_servers_elect_one_leader_and_replicate() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let (index, _) = net.write("hello");
    net.run_for(300, 10);
    for id in [1, 2, 3] {
        assert_eq!(net.core(id).commit_index(), index, "node {id}");
        assert_eq!(net.applied_data(id), vec![Bytes::from_static(b"hello")]);
        assert_eq!(net.core(id).leader(), Some(leader));
    }
}

#[test]
fn followers_refuse_proposals_naming_the_leader() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let now = net.now;
    assert_eq!(
        net.core_mut(follower).propose(now, Bytes::new()),
        Err(RaftError::NotLeader {
            leader: Some(leader)
        })
    );
}

#[test]
fn votes_are_sent_only_after_persisting() {
    let mut core = RaftCore::new(test_config(1), Restored::default(), 5, 0);
    core.bootstrap(voters(&[1, 2, 3])).unwrap();
    core.step(
        3000,
        2,
        Message::RequestVote {
            term: 5,
            last_log_index: 1,
            last_log_term: 1,
            pre_vote: false,
            leadership_transfer: false,
        },
    );
    let ready = core.ready();
    assert_eq!(ready.hard_state.unwrap().vote, Some(2));
    assert_eq!(ready.hard_state.unwrap().term, 5);
    assert!(ready.messages.is_empty());
    assert!(matches!(
        ready.messages_after_persist[..],
        [(
            2,
            Message::VoteResponse {
                granted: true,
                term: 5,
                ..
            }
        )]
    ));
}

#[test]
fn a_stale_log_does_not_win_votes() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let behind = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(behind);
    net.write("x");
    // The isolated server cannot catch up and campaigns; nobody votes for its old log.
    net.run_for(5 * ELECTION_MS, 10);
    net.heal();
    net.run_for(5 * ELECTION_MS, 10);
    let leader = net.the_leader();
    assert_ne!(leader, behind);
    assert_eq!(net.applied_data(behind), vec![Bytes::from_static(b"x")]);
}

// ----- pre-vote and check-quorum -------------------------------------------------------

#[test]
fn pre_vote_keeps_a_rejoining_server_from_disrupting_the_leader() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let term = net.core(leader).term();
    let loner = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(loner);
    net.run_for(10 * ELECTION_MS, 10);
    // Pre-votes never reach a quorum, so the loner's term did not move.
    assert_eq!(net.core(loner).term(), term);
    net.heal();
    net.run_for(2 * ELECTION_MS, 10);
    assert_eq!(net.the_leader(), leader);
    assert_eq!(net.core(leader).term(), term);
}

#[test]
fn without_pre_vote_a_rejoining_server_disrupts() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| {
        c.pre_vote = false;
        c.check_quorum = false;
    });
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let term = net.core(leader).term();
    let loner = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(loner);
    net.run_for(10 * ELECTION_MS, 10);
    assert!(
        net.core(loner).term() > term + 2,
        "the loner kept raising its term"
    );
    net.heal();
    net.run_for(3 * ELECTION_MS, 10);
    assert!(
        net.core(net.the_leader()).term() > term,
        "the cluster had to move on"
    );
}

#[test]
fn check_quorum_steps_down_a_partitioned_leader() {
    let mut net = elected_three();
    let leader = net.the_leader();
    net.isolate(leader);
    net.run_for(3 * ELECTION_MS, 10);
    assert_ne!(net.core(leader).role(), Role::Leader);
    let leaders = net.leaders();
    assert_eq!(leaders.len(), 1);
    assert_ne!(leaders[0], leader);
}

#[test]
fn followers_ignore_disruptive_vote_requests_while_hearing_from_the_leader() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let term = net.core(follower).term();
    let now = net.now;
    let last_index = net.core(follower).last_index();
    net.core_mut(follower).step(
        now,
        99,
        Message::RequestVote {
            term: term + 5,
            last_log_index: last_index + 10,
            last_log_term: term + 4,
            pre_vote: false,
            leadership_transfer: false,
        },
    );
    assert_eq!(net.core(follower).term(), term);
    let ready = net.core_mut(follower).ready();
    assert!(ready
        .messages
        .iter()
        .chain(&ready.messages_after_persist)
        .any(|(to, m)| *to == 99 && matches!(m, Message::VoteResponse { granted: false, .. })));
}

// ----- lease ---------------------------------------------------------------------------

#[test]
fn lease_holds_while_a_quorum_answers_and_expires_when_cut_off() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let lease = net
        .core(leader)
        .leader_lease_until()
        .expect("a fresh leader has a lease");
    assert!(lease > net.now);
    assert!(lease <= net.now + 900);
    net.isolate(leader);
    let cut_at = net.now;
    net.run_for(500, 10);
    // No acknowledgement since the cut: the lease cannot outlive the last one by more than
    // lease_ms.
    let lease = net.core(leader).leader_lease_until();
    assert!(lease.is_some_and(|t| t <= cut_at + 900));
    net.run_for(600, 10);
    assert!(net
        .core(leader)
        .leader_lease_until()
        .is_none_or(|t| t <= net.now));
}

#[test]
fn a_restarted_follower_refuses_votes_for_an_election_timeout() {
    let mut core = RaftCore::new(test_config(2), Restored::default(), 1, 10_000);
    core.bootstrap(voters(&[1, 2, 3])).unwrap();
    let ask = |term| Message::RequestVote {
        term,
        last_log_index: 1,
        last_log_term: 1,
        pre_vote: false,
        leadership_transfer: false,
    };
    core.step(10_500, 3, ask(2));
    assert_eq!(core.term(), 1, "refused inside the guard");
    core.step(11_000, 3, ask(2));
    assert_eq!(core.term(), 2);
    let ready = core.ready();
    assert!(matches!(
        ready.messages_after_persist.last(),
        Some((3, Message::VoteResponse { granted: true, .. }))
    ));
}

// ----- replication, back-tracking, flow control ------------------------------------------

#[test]
fn fast_backtracking_skips_a_conflicting_term_per_round_trip() {
    // Leader log: 1..=3 in term 1 then many in term 3. Follower log: 1..=3 in term 1, then
    // 50 entries of term 2 that never committed.
    let entry = |index, term| Entry {
        index,
        term,
        kind: EntryKind::Normal,
        data: Bytes::new(),
    };
    let mut follower_entries: Vec<Entry> = (1..=3).map(|i| entry(i, 1)).collect();
    follower_entries.extend((4..=53).map(|i| entry(i, 2)));
    let mut follower = RaftCore::new(
        test_config(2),
        Restored {
            hard_state: HardState {
                term: 2,
                vote: None,
                commit: 3,
            },
            snapshot: None,
            entries: follower_entries,
        },
        1,
        0,
    );
    // The leader (term 3) appends at 60 after 4..=59 of term 3; it probes at 59.
    follower.step(
        5000,
        1,
        Message::AppendEntries {
            term: 3,
            prev_log_index: 59,
            prev_log_term: 3,
            entries: vec![],
            leader_commit: 3,
            read_seq: 0,
            sent_at: 5000,
        },
    );
    let ready = follower.ready();
    let reject = ready
        .messages
        .iter()
        .find_map(|(_, m)| match m {
            Message::AppendResponse { reject, .. } => *reject,
            _ => None,
        })
        .expect("a refusal");
    assert_eq!(reject.conflict_term, None);
    assert_eq!(reject.hint_index, 54, "the follower's log is shorter");
    follower.step(
        5001,
        1,
        Message::AppendEntries {
            term: 3,
            prev_log_index: 53,
            prev_log_term: 3,
            entries: vec![],
            leader_commit: 3,
            read_seq: 0,
            sent_at: 5001,
        },
    );
    let ready = follower.ready();
    let reject = ready
        .messages
        .iter()
        .find_map(|(_, m)| match m {
            Message::AppendResponse { reject, .. } => *reject,
            _ => None,
        })
        .expect("a refusal");
    assert_eq!(reject.conflict_term, Some(2));
    assert_eq!(
        reject.hint_index, 4,
        "the whole conflicting term is skipped"
    );
}

#[test]
fn a_diverged_follower_is_repaired() {
    let mut net = elected_three();
    let old_leader = net.the_leader();
    // The leader writes entries that only it gets, then loses leadership.
    net.isolate(old_leader);
    let now = net.now;
    for _ in 0..200 {
        net.core_mut(old_leader)
            .propose(now, Bytes::from_static(b"lost"))
            .unwrap();
    }
    net.settle();
    net.run_for(3 * ELECTION_MS, 10);
    let new_leader = net.the_leader();
    assert_ne!(new_leader, old_leader);
    net.write("kept");
    net.heal();
    let queued_before = net.queue.len();
    assert_eq!(queued_before, 0);
    net.run_for(3 * ELECTION_MS, 10);
    assert_eq!(
        net.applied_data(old_leader),
        vec![Bytes::from_static(b"kept")]
    );
    assert_eq!(
        net.core(old_leader).last_index(),
        net.core(new_leader).last_index()
    );
}

#[test]
fn replication_pipelines_up_to_the_inflight_window() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| {
        c.append_entries_max = 1;
        c.inflight_appends_max = 4;
    });
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    net.hold = true;
    let now = net.now;
    for _ in 0..10 {
        net.core_mut(leader)
            .propose(now, Bytes::from_static(b"p"))
            .unwrap();
    }
    net.settle();
    let per_peer = |net: &TestNet, peer: NodeId| {
        net.queue
            .iter()
            .filter(|(from, to, m)| {
                *from == leader
                    && *to == peer
                    && matches!(m, Message::AppendEntries { entries, .. } if !entries.is_empty())
            })
            .count()
    };
    let peer = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    assert_eq!(
        per_peer(&net, peer),
        4,
        "the window bounds appends in flight"
    );
    net.hold = false;
    net.settle();
    net.run_for(200, 10);
    assert_eq!(net.applied_data(peer).len(), 10);
}

// ----- ReadIndex -----------------------------------------------------------------------

#[test]
fn read_index_needs_a_quorum_round_and_batches_reads() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let (index, _) = net.write("w");
    net.hold = true;
    let now = net.now;
    net.core_mut(leader).read_index(now, 1).unwrap();
    net.core_mut(leader).read_index(now, 2).unwrap();
    net.settle();
    assert!(
        net.nodes[&leader].read_states.is_empty(),
        "no answer before a quorum"
    );
    let heartbeats = net
        .queue
        .iter()
        .filter(|(from, _, m)| *from == leader && matches!(m, Message::AppendEntries { .. }))
        .count();
    assert_eq!(heartbeats, 2, "one round for both reads");
    net.hold = false;
    net.settle();
    let states = &net.nodes[&leader].read_states;
    assert_eq!(
        states,
        &vec![
            ReadState { context: 1, index },
            ReadState { context: 2, index }
        ]
    );
}

#[test]
fn read_index_is_not_confirmed_by_a_minority() {
    let mut net = elected_three();
    let leader = net.the_leader();
    net.isolate(leader);
    let now = net.now;
    net.core_mut(leader).read_index(now, 7).unwrap();
    net.run_for(300, 10);
    assert!(net.nodes[&leader].read_states.is_empty());
}

#[test]
fn reads_are_dropped_when_leadership_is_lost() {
    let mut net = elected_three();
    let leader = net.the_leader();
    net.isolate(leader);
    let now = net.now;
    net.core_mut(leader).read_index(now, 7).unwrap();
    // Step down via check-quorum.
    let mut dropped = Vec::new();
    for _ in 0..300 {
        net.now += 10;
        let now = net.now;
        net.core_mut(leader).tick(now);
        let ready = net.core_mut(leader).ready();
        dropped.extend(ready.dropped_reads.iter().copied());
        let done = ready.done();
        net.core_mut(leader).advance(now, done);
    }
    assert_eq!(dropped, vec![7]);
}

#[test]
fn the_read_queue_is_bounded() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| c.read_requests_pending_max = 3);
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    net.isolate(leader);
    let now = net.now;
    for context in 0..3 {
        net.core_mut(leader).read_index(now, context).unwrap();
    }
    assert_eq!(
        net.core_mut(leader).read_index(now, 3),
        Err(RaftError::ReadQueueFull { reads_max: 3 })
    );
}

// ----- leadership transfer -------------------------------------------------------------

#[test]
fn leadership_transfer_hands_over_and_blocks_proposals_meanwhile() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let target = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.hold = true;
    let now = net.now;
    net.core_mut(leader)
        .transfer_leadership(now, Some(target))
        .unwrap();
    assert_eq!(
        net.core_mut(leader).propose(now, Bytes::new()),
        Err(RaftError::LeadershipTransferInProgress { to: target })
    );
    assert_eq!(net.core(leader).leader_lease_until(), None);
    net.hold = false;
    net.settle();
    assert_eq!(net.the_leader(), target);
    net.write("after");
    net.run_for(300, 10);
    assert_eq!(net.applied_data(leader), vec![Bytes::from_static(b"after")]);
}

#[test]
fn leadership_transfer_waits_for_the_target_to_catch_up() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let target = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(target);
    net.write("a");
    let now = net.now;
    net.core_mut(leader)
        .transfer_leadership(now, Some(target))
        .unwrap();
    net.settle();
    assert_eq!(
        net.the_leader(),
        leader,
        "no TimeoutNow to a lagging target"
    );
    net.heal();
    net.run_for(300, 10);
    assert_eq!(net.the_leader(), target);
}

#[test]
fn an_unfinished_transfer_times_out() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let target = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(target);
    net.write("a");
    let now = net.now;
    net.core_mut(leader)
        .transfer_leadership(now, Some(target))
        .unwrap();
    net.run_for(ELECTION_MS + 100, 10);
    assert_eq!(net.the_leader(), leader);
    let now = net.now;
    assert!(net.core_mut(leader).propose(now, Bytes::new()).is_ok());
}

// ----- snapshots -------------------------------------------------------------------------

#[test]
fn a_lagging_follower_gets_a_chunked_snapshot_with_a_window_in_flight() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| {
        c.trailing_entries = 2;
        c.snapshot_chunk_bytes = 10;
        c.snapshot_inflight_chunks_max = 4;
    });
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let lagging = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(lagging);
    for _ in 0..20 {
        net.write("entry");
    }
    let applied = net.core(leader).applied_index();
    let meta = net.core(leader).snapshot_meta(applied).unwrap();
    let data = Bytes::from(vec![7u8; 95]);
    net.core_mut(leader).snapshot_taken(meta, data.clone());
    assert!(net.core(leader).first_log_index() > 2);
    net.heal();
    // Deliver step by step until the transfer starts, to observe the window.
    net.now += 100;
    let now = net.now;
    net.core_mut(leader).tick(now);
    net.hold = true;
    net.deliver_until(|queue| {
        queue
            .iter()
            .any(|(_, _, m)| matches!(m, Message::InstallSnapshot { .. }))
    });
    let chunks: Vec<u64> = net
        .queue
        .iter()
        .filter_map(|(_, to, m)| match m {
            Message::InstallSnapshot { offset, .. } if *to == lagging => Some(*offset),
            _ => None,
        })
        .collect();
    assert_eq!(
        chunks,
        vec![0, 10, 20, 30],
        "four chunks in flight, not stop-and-wait"
    );
    net.hold = false;
    net.settle();
    net.run_for(300, 10);
    assert_eq!(net.nodes[&lagging].snapshots_received, 1);
    assert_eq!(
        net.nodes[&lagging].installed, data,
        "assembled from its pieces"
    );
    assert_eq!(
        net.core(lagging).commit_index(),
        net.core(leader).commit_index()
    );
    // The follower can serve the same snapshot later.
    assert_eq!(net.core(lagging).snapshot_index(), applied);
}

#[test]
fn a_lost_snapshot_chunk_is_resent() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| {
        c.trailing_entries = 0;
        c.snapshot_chunk_bytes = 10;
        c.snapshot_inflight_chunks_max = 3;
        c.snapshot_retransmit_ms = 300;
    });
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let lagging = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(lagging);
    for _ in 0..5 {
        net.write("entry");
    }
    let applied = net.core(leader).applied_index();
    let meta = net.core(leader).snapshot_meta(applied).unwrap();
    net.core_mut(leader)
        .snapshot_taken(meta, Bytes::from(vec![1u8; 45]));
    net.heal();
    net.now += 100;
    let now = net.now;
    net.core_mut(leader).tick(now);
    net.hold = true;
    net.deliver_until(|queue| {
        queue
            .iter()
            .any(|(_, _, m)| matches!(m, Message::InstallSnapshot { .. }))
    });
    // Lose the second chunk.
    let position = net
        .queue
        .iter()
        .position(|(_, to, m)| {
            *to == lagging && matches!(m, Message::InstallSnapshot { offset: 10, .. })
        })
        .unwrap();
    net.queue.remove(position);
    net.hold = false;
    net.settle();
    net.run_for(1000, 10);
    assert_eq!(net.nodes[&lagging].snapshots_received, 1);
    assert_eq!(
        net.core(lagging).commit_index(),
        net.core(leader).commit_index()
    );
}

#[test]
fn snapshot_wanted_when_no_snapshot_data_is_held() {
    // A server restarted from a snapshot whose data the driver has not handed back yet.
    let meta = SnapshotMeta {
        last_index: 10,
        last_term: 1,
        membership: voters(&[1, 2, 3]),
    };
    let restored = Restored {
        hard_state: HardState {
            term: 1,
            vote: None,
            commit: 10,
        },
        snapshot: Some(meta.clone()),
        entries: vec![],
    };
    let mut core = RaftCore::new(test_config(1), restored, 1, 0);
    core.tick(2 * ELECTION_MS);
    assert_eq!(core.role(), Role::PreCandidate);
    core.step(
        2 * ELECTION_MS,
        2,
        Message::VoteResponse {
            term: 2,
            pre_vote: true,
            granted: true,
        },
    );
    assert_eq!(core.role(), Role::Candidate);
    core.step(
        2 * ELECTION_MS,
        2,
        Message::VoteResponse {
            term: 2,
            pre_vote: false,
            granted: true,
        },
    );
    assert_eq!(core.role(), Role::Leader);
    let ready = core.ready();
    core.advance(2 * ELECTION_MS, ready.done());
    // Peer 2 has nothing at all.
    core.step(
        2 * ELECTION_MS + 1,
        2,
        Message::AppendResponse {
            term: 2,
            match_index: 0,
            reject: Some(AppendReject {
                prev_index: 10,
                conflict_term: None,
                hint_index: 1,
            }),
            read_seq: 0,
            sent_at: 2 * ELECTION_MS,
        },
    );
    let ready = core.ready();
    assert!(ready.snapshot_wanted);
    core.advance(2 * ELECTION_MS + 1, ready.done());
    core.snapshot_taken(meta, Bytes::from_static(b"state"));
    core.tick(2 * ELECTION_MS + 200);
    let ready = core.ready();
    assert!(ready.messages.iter().any(|(to, m)| *to == 2
        && matches!(
            m,
            Message::InstallSnapshot {
                done: true,
                offset: 0,
                ..
            }
        )));
}

#[test]
fn compaction_keeps_trailing_entries() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| c.trailing_entries = 5);
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    for _ in 0..20 {
        net.write("e");
    }
    let applied = net.core(leader).applied_index();
    let meta = net.core(leader).snapshot_meta(applied).unwrap();
    net.core_mut(leader)
        .snapshot_taken(meta, Bytes::from_static(b"s"));
    assert_eq!(net.core(leader).first_log_index(), applied - 4);
    assert_eq!(net.core(leader).snapshot_index(), applied);
    let ready = net.core_mut(leader).ready();
    assert_eq!(ready.compact_through, Some(applied - 5));
}

// ----- the bounded in-memory log -----------------------------------------------------------

const ENTRIES: [&str; 40] = [
    "e00", "e01", "e02", "e03", "e04", "e05", "e06", "e07", "e08", "e09", "e10", "e11", "e12",
    "e13", "e14", "e15", "e16", "e17", "e18", "e19", "e20", "e21", "e22", "e23", "e24", "e25",
    "e26", "e27", "e28", "e29", "e30", "e31", "e32", "e33", "e34", "e35", "e36", "e37", "e38",
    "e39",
];

#[test]
fn entries_every_peer_holds_leave_memory_once_applied() {
    let mut net = elected_three();
    for data in &ENTRIES[..10] {
        net.write(data);
    }
    net.run_for(300, 10);
    for id in [1, 2, 3] {
        let status = net.core(id).status();
        assert_eq!(status.cached_log_bytes, 0, "node {id}: {status:?}");
        assert_eq!(status.cache_first_index, status.last_index + 1, "node {id}");
        // Still stored: the terms stay known and nothing was compacted.
        assert_eq!(status.first_index, 1, "node {id}");
        assert_eq!(net.core(id).log_term(status.last_index), Some(status.term));
    }
}

#[test]
fn a_lagging_follower_catches_up_from_the_durable_log_within_the_cache_bound() {
    // Each entry costs 3 + 24 bytes: the cache holds at most 4 of them.
    let cache_bytes = 4 * 27;
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| {
        c.log_cache_bytes = cache_bytes;
        c.append_entries_max = 3;
        c.inflight_appends_max = 2;
    });
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let lagging = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(lagging);
    for data in &ENTRIES {
        net.write(data);
    }
    let status = net.core(leader).status();
    assert!(status.cached_log_bytes <= cache_bytes, "{status:?}");
    assert!(
        status.cache_first_index > net.core(lagging).last_index() + 1,
        "the lagging follower's next entries left memory: {status:?}"
    );
    net.heal();
    net.run_for(500, 10);
    assert_eq!(
        net.core(lagging).last_index(),
        net.core(leader).last_index()
    );
    assert_eq!(net.applied_data(lagging), net.applied_data(leader));
    assert_eq!(net.nodes[&lagging].snapshots_received, 0);
    // Three entries per read, for all but the four the cache kept.
    let reads = net.nodes[&leader].log_reads;
    assert!(reads >= (ENTRIES.len() - 4) / 3, "{reads} reads");
    assert_eq!(net.core(leader).status().cached_log_bytes, 0);
}

#[test]
fn a_lagging_follower_whose_entries_cannot_be_read_back_gets_a_snapshot() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| c.log_cache_bytes = 0);
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let lagging = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(lagging);
    for data in &ENTRIES[..10] {
        net.write(data);
    }
    let applied = net.core(leader).applied_index();
    let meta = net.core(leader).snapshot_meta(applied).unwrap();
    net.core_mut(leader)
        .snapshot_taken(meta, Bytes::from_static(b"state"));
    // The disk lost what the core believes stored: the read fails, a snapshot goes instead.
    net.nodes.get_mut(&leader).unwrap().durable_entries.clear();
    net.heal();
    net.run_for(500, 10);
    assert_eq!(net.nodes[&lagging].snapshots_received, 1);
    assert_eq!(
        net.core(lagging).last_index(),
        net.core(leader).last_index()
    );
}

#[test]
fn log_reads_that_come_back_stale_or_wrong_are_not_sent() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| c.log_cache_bytes = 0);
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let lagging = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let before = net.core(lagging).last_index();
    net.isolate(lagging);
    for data in &ENTRIES[..5] {
        net.write(data);
    }
    let now = net.now;
    let read = LogRead {
        to: lagging,
        from: before + 1,
        through: before + 2,
        bytes_max: 1 << 20,
    };
    // An answer nobody asked for is ignored.
    net.core_mut(leader)
        .log_read_done(now, read, Ok(Vec::new()));
    assert!(!net.core(leader).has_ready());
    assert_eq!(net.core(leader).messages_dropped(), 0);
}

// ----- membership ------------------------------------------------------------------------

#[test]
fn add_a_nonvoter_then_promote_it() {
    let mut net = TestNet::new(&[1, 2, 3, 4], &[1, 2, 3], |_| {});
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    net.write("before");
    let now = net.now;
    net.core_mut(leader)
        .propose_membership_change(
            now,
            MembershipChange::AddNonvoter {
                id: 4,
                name: "n4".into(),
                address: "a4".into(),
            },
        )
        .unwrap();
    // One change at a time.
    assert!(matches!(
        net.core_mut(leader)
            .propose_membership_change(now, MembershipChange::Promote { id: 4 }),
        Err(RaftError::MembershipChangePending { .. })
    ));
    net.run_for(300, 10);
    assert_eq!(net.applied_data(4), vec![Bytes::from_static(b"before")]);
    assert!(!net.core(leader).membership().is_voter(4));
    let now = net.now;
    net.core_mut(leader)
        .propose_membership_change(now, MembershipChange::Promote { id: 4 })
        .unwrap();
    net.run_for(300, 10);
    for id in [1, 2, 3, 4] {
        assert!(net.core(id).membership().is_voter(4), "node {id}");
    }
    // With four voters, two servers are not a quorum.
    let others: Vec<NodeId> = [1, 2, 3, 4]
        .into_iter()
        .filter(|&id| id != leader)
        .collect();
    net.isolate(others[0]);
    net.isolate(others[1]);
    let now = net.now;
    let (index, _) = net.core_mut(leader).propose(now, Bytes::new()).unwrap();
    net.run_for(300, 10);
    assert!(net.core(leader).commit_index() < index);
}

#[test]
fn removing_the_leader_makes_it_step_down_after_commit() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let now = net.now;
    net.core_mut(leader)
        .propose_membership_change(now, MembershipChange::Remove { id: leader })
        .unwrap();
    net.settle();
    assert_ne!(net.core(leader).role(), Role::Leader);
    net.run_for(3 * ELECTION_MS, 10);
    let new_leader = net.the_leader();
    assert_ne!(new_leader, leader);
    assert_eq!(net.core(new_leader).membership().voter_count(), 2);
    assert!(!net.core(new_leader).membership().contains(leader));
    net.write("two voters");
    assert_eq!(
        net.applied_data(new_leader),
        vec![Bytes::from_static(b"two voters")]
    );
}

#[test]
fn membership_changes_are_validated() {
    let mut net = elected_three();
    let leader = net.the_leader();
    let now = net.now;
    let core = net.core_mut(leader);
    assert!(matches!(
        core.propose_membership_change(now, MembershipChange::Promote { id: 9 }),
        Err(RaftError::InvalidMembershipChange(_))
    ));
    assert!(matches!(
        core.propose_membership_change(
            now,
            MembershipChange::AddVoter {
                id: 2,
                name: String::new(),
                address: String::new()
            }
        ),
        Err(RaftError::InvalidMembershipChange(_))
    ));
    assert!(matches!(
        core.propose_membership_change(now, MembershipChange::Remove { id: 9 }),
        Err(RaftError::InvalidMembershipChange(_))
    ));
}

#[test]
fn a_follower_reverts_membership_when_the_entry_is_truncated() {
    let mut net = elected_three();
    let old_leader = net.the_leader();
    net.isolate(old_leader);
    let now = net.now;
    net.core_mut(old_leader)
        .propose_membership_change(
            now,
            MembershipChange::Remove {
                id: old_leader % 3 + 1,
            },
        )
        .unwrap();
    net.settle();
    assert_eq!(net.core(old_leader).membership().voter_count(), 2);
    net.run_for(3 * ELECTION_MS, 10);
    net.heal();
    net.run_for(3 * ELECTION_MS, 10);
    assert_eq!(net.core(old_leader).membership().voter_count(), 3);
}

// ----- wire ------------------------------------------------------------------------------

#[test]
fn messages_round_trip_through_msgpack() {
    let message = Message::AppendEntries {
        term: 3,
        prev_log_index: 7,
        prev_log_term: 2,
        entries: vec![Entry {
            index: 8,
            term: 3,
            kind: EntryKind::Membership,
            data: voters(&[1, 2]).encode(),
        }],
        leader_commit: 6,
        read_seq: 9,
        sent_at: 1234,
    };
    let bytes = rmp_serde::to_vec(&message).unwrap();
    let back: Message = rmp_serde::from_slice(&bytes).unwrap();
    assert_eq!(back, message);
    assert!(Membership::decode(b"\xff\x00garbage").is_err());
}

#[test]
fn malformed_appends_are_dropped() {
    let mut core = RaftCore::new(test_config(2), Restored::default(), 1, 0);
    core.bootstrap(voters(&[1, 2, 3])).unwrap();
    core.step(
        5000,
        1,
        Message::AppendEntries {
            term: 2,
            prev_log_index: 1,
            prev_log_term: 1,
            entries: vec![Entry {
                index: 5,
                term: 2,
                kind: EntryKind::Normal,
                data: Bytes::new(),
            }],
            leader_commit: 5,
            read_seq: 0,
            sent_at: 0,
        },
    );
    assert_eq!(core.last_index(), 1);
    assert_eq!(core.status().messages_dropped, 1);
}

// ----- regressions found by the simulator ------------------------------------------------

#[test]
fn a_leader_says_nothing_until_its_term_is_durable() {
    // A sole voter elects itself without a vote round, so its new term is not durable yet.
    let mut core = RaftCore::new(test_config(1), Restored::default(), 1, 0);
    let mut membership = voters(&[1]);
    membership.members.insert(
        2,
        Member {
            voter: false,
            name: "n2".into(),
            address: "a2".into(),
        },
    );
    core.bootstrap(membership).unwrap();
    core.tick(1);
    assert_eq!(core.role(), Role::Leader);
    let ready = core.ready();
    assert!(
        ready.messages.is_empty(),
        "nothing may leave before the term is durable"
    );
    assert!(ready
        .messages_after_persist
        .iter()
        .any(|(to, m)| *to == 2 && matches!(m, Message::AppendEntries { .. })));
    core.advance(1, ready.done());
    // Peer 2 acknowledges the probe (bootstrap entry and Noop) and moves to replicate.
    core.step(
        2,
        2,
        Message::AppendResponse {
            term: core.term(),
            match_index: 2,
            reject: None,
            read_seq: 0,
            sent_at: 1,
        },
    );
    core.propose(2, Bytes::from_static(b"x")).unwrap();
    let ready = core.ready();
    assert!(
        ready.messages.iter().any(|(to, m)| *to == 2
            && matches!(m, Message::AppendEntries { entries, .. } if !entries.is_empty())),
        "once durable, appends leave while the leader's own write runs"
    );
}

#[test]
fn a_leader_removing_itself_has_no_lease() {
    let mut net = elected_three();
    let leader = net.the_leader();
    assert!(net.core(leader).leader_lease_until().is_some());
    let now = net.now;
    net.core_mut(leader)
        .propose_membership_change(now, MembershipChange::Remove { id: leader })
        .unwrap();
    assert_eq!(net.core(leader).leader_lease_until(), None);
}

#[test]
fn a_server_whose_removal_is_uncommitted_can_still_be_elected() {
    // Two voters; the leader appends its own removal while cut off, then loses leadership.
    // The other voter's log is shorter, so only the removed server can win; it must
    // campaign, commit its removal and hand over.
    let mut net = TestNet::new(&[1, 2], &[1, 2], |_| {});
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let other = 3 - leader;
    net.write("a");
    net.isolate(leader);
    let now = net.now;
    net.core_mut(leader)
        .propose_membership_change(now, MembershipChange::Remove { id: leader })
        .unwrap();
    net.run_for(3 * ELECTION_MS, 10);
    assert_ne!(
        net.core(leader).role(),
        Role::Leader,
        "check-quorum stepped it down"
    );
    net.heal();
    net.run_for(10 * ELECTION_MS, 10);
    assert_eq!(net.the_leader(), other);
    assert_eq!(net.core(other).membership(), &voters(&[other]));
    assert!(net.core(other).commit_index() >= net.core(other).membership_index());
    net.write("b");
    assert_eq!(
        net.applied_data(other),
        vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]
    );
}

#[test]
fn a_snapshot_transfer_restarts_when_the_follower_lost_its_partial_copy() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| {
        c.trailing_entries = 0;
        c.snapshot_chunk_bytes = 10;
        c.snapshot_inflight_chunks_max = 1;
        c.snapshot_retransmit_ms = 300;
    });
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let lagging = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    net.isolate(lagging);
    for _ in 0..5 {
        net.write("entry");
    }
    let applied = net.core(leader).applied_index();
    let meta = net.core(leader).snapshot_meta(applied).unwrap();
    net.core_mut(leader)
        .snapshot_taken(meta, Bytes::from(vec![3u8; 45]));
    net.heal();
    net.now += 100;
    let now = net.now;
    net.core_mut(leader).tick(now);
    net.hold = true;
    // Let the first chunk arrive and be acknowledged.
    net.deliver_until(|queue| {
        queue.iter().any(|(_, to, m)| {
            *to == leader
                && matches!(
                    m,
                    Message::InstallSnapshotResponse {
                        next_offset: 10,
                        ..
                    }
                )
        })
    });
    net.deliver_until(|queue| {
        queue
            .iter()
            .any(|(_, _, m)| matches!(m, Message::InstallSnapshot { offset: 10, .. }))
    });
    // The follower restarts and forgets the partial copy.
    let node = net.nodes.get_mut(&lagging).unwrap();
    let restored = Restored {
        hard_state: node.hard_state,
        snapshot: None,
        entries: node.durable_entries.clone(),
    };
    node.core = RaftCore::new(test_config(lagging), restored, 9, net.now);
    net.hold = false;
    net.run_for(3 * ELECTION_MS, 10);
    assert_eq!(net.nodes[&lagging].snapshots_received, 1);
    assert_eq!(
        net.core(lagging).commit_index(),
        net.core(leader).commit_index()
    );
}

#[test]
fn a_lost_pipeline_tail_is_detected_without_new_proposals() {
    let mut net = TestNet::new(&[1, 2, 3], &[1, 2, 3], |c| c.inflight_appends_max = 4);
    net.run_for(3 * ELECTION_MS, 10);
    let leader = net.the_leader();
    let now = net.now;
    net.core_mut(leader)
        .propose(now, Bytes::from_static(b"lost"))
        .unwrap();
    net.hold = true;
    net.settle();
    // Lose every append carrying the entry; only heartbeats can repair this.
    net.queue.retain(
        |(_, _, m)| !matches!(m, Message::AppendEntries { entries, .. } if !entries.is_empty()),
    );
    net.hold = false;
    net.run_for(1000, 10);
    for id in [1, 2, 3] {
        assert_eq!(
            net.applied_data(id),
            vec![Bytes::from_static(b"lost")],
            "node {id}"
        );
    }
}

#[test]
fn an_entry_of_an_earlier_term_is_not_committed_by_counting() {
    // Raft figure 8: the new leader of term 3 holds an uncommitted entry of term 2. A
    // majority holding it does not make it committed; only its own Noop committing does.
    let entry = |index, term, kind, data| Entry {
        index,
        term,
        kind,
        data,
    };
    let restored = Restored {
        hard_state: HardState {
            term: 2,
            vote: None,
            commit: 1,
        },
        snapshot: None,
        entries: vec![
            entry(1, 1, EntryKind::Membership, voters(&[1, 2, 3]).encode()),
            entry(2, 2, EntryKind::Normal, Bytes::from_static(b"old")),
        ],
    };
    let mut core = RaftCore::new(test_config(1), restored, 1, 0);
    let now = 3 * ELECTION_MS;
    core.tick(now);
    core.step(
        now,
        2,
        Message::VoteResponse {
            term: 3,
            pre_vote: true,
            granted: true,
        },
    );
    core.step(
        now,
        2,
        Message::VoteResponse {
            term: 3,
            pre_vote: false,
            granted: true,
        },
    );
    assert_eq!(core.role(), Role::Leader);
    assert_eq!(core.term(), 3);
    let ready = core.ready();
    core.advance(now, ready.done());
    let acknowledge = |core: &mut RaftCore, match_index| {
        core.step(
            now,
            2,
            Message::AppendResponse {
                term: 3,
                match_index,
                reject: None,
                read_seq: 0,
                sent_at: now,
            },
        )
    };
    acknowledge(&mut core, 2);
    assert_eq!(
        core.commit_index(),
        1,
        "index 2 is from term 2: not committed by counting"
    );
    acknowledge(&mut core, 3);
    assert_eq!(
        core.commit_index(),
        3,
        "the Noop of term 3 commits, and index 2 with it"
    );
}
