//! Criterion benchmarks of the pure Raft core's CPU cost (no disk, no network): what the
//! raft thread spends per committed batch, and how fast a snapshot moves through the chunk
//! window (leader slicing + follower reassembly).
//!
//! Run: `cargo bench --bench raft_core`.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use praetor::raft::{
    Member, Membership, Message, NodeId, RaftConfig, RaftCore, Ready, Restored, Role,
};

const BATCH_ENTRIES: usize = 64;
const ENTRY_BYTES: usize = 100;
const SNAPSHOT_BYTES: usize = 64 * 1024 * 1024;

fn membership(voters: &[NodeId], nonvoters: &[NodeId]) -> Membership {
    let mut members = BTreeMap::new();
    for (&id, voter) in voters
        .iter()
        .map(|id| (id, true))
        .chain(nonvoters.iter().map(|id| (id, false)))
    {
        members.insert(
            id,
            Member {
                voter,
                name: format!("n{id}"),
                address: String::new(),
            },
        );
    }
    Membership { members }
}

/// Carries out a Ready the way the driver does, with an instantaneous disk; returns the
/// messages to deliver.
fn handle(core: &mut RaftCore, now: u64, ready: Ready) -> Vec<(NodeId, Message)> {
    let done = ready.done();
    let mut out = ready.messages;
    out.extend(ready.messages_after_persist);
    core.advance(now, done);
    out
}

/// A group of cores exchanging messages in memory until quiet.
struct Group {
    cores: BTreeMap<NodeId, RaftCore>,
    now: u64,
}

impl Group {
    fn settle(&mut self) {
        let mut queue: VecDeque<(NodeId, NodeId, Message)> = VecDeque::new();
        loop {
            for (&id, core) in self.cores.iter_mut() {
                while core.has_ready() {
                    let ready = core.ready();
                    for (to, m) in handle(core, self.now, ready) {
                        queue.push_back((id, to, m));
                    }
                }
            }
            let Some((from, to, message)) = queue.pop_front() else {
                return;
            };
            if let Some(core) = self.cores.get_mut(&to) {
                core.step(self.now, from, message);
            }
        }
    }

    fn elect(ids: &[NodeId], config: impl Fn(NodeId) -> RaftConfig) -> Self {
        let mut cores = BTreeMap::new();
        for &id in ids {
            let mut core = RaftCore::new(config(id), Restored::default(), id, 0);
            core.bootstrap(membership(ids, &[])).unwrap();
            cores.insert(id, core);
        }
        let mut group = Group { cores, now: 0 };
        while !group.cores.values().any(|c| c.role() == Role::Leader) {
            group.now += 10;
            let now = group.now;
            for core in group.cores.values_mut() {
                core.tick(now);
            }
            group.settle();
        }
        group
    }

    fn leader(&mut self) -> &mut RaftCore {
        self.cores
            .values_mut()
            .find(|c| c.role() == Role::Leader)
            .unwrap()
    }
}

fn single_voter_commit(c: &mut Criterion) {
    let mut group = c.benchmark_group("raft_core");
    group.throughput(Throughput::Elements(BATCH_ENTRIES as u64));
    let mut core = RaftCore::new(RaftConfig::new(1), Restored::default(), 1, 0);
    core.bootstrap(membership(&[1], &[])).unwrap();
    core.tick(1);
    let ready = core.ready();
    handle(&mut core, 1, ready);
    let payload = Bytes::from(vec![7u8; ENTRY_BYTES]);
    let mut now = 1;
    group.bench_function("single_voter_propose_persist_apply_batch64", |b| {
        b.iter(|| {
            now += 1;
            for _ in 0..BATCH_ENTRIES {
                core.propose(now, payload.clone()).unwrap();
            }
            // Persist the batch, then apply what committed.
            let ready = core.ready();
            handle(&mut core, now, ready);
            let ready = core.ready();
            assert_eq!(ready.committed.len(), BATCH_ENTRIES);
            handle(&mut core, now, ready);
        })
    });
    group.finish();
}

fn three_node_replication(c: &mut Criterion) {
    let mut group = c.benchmark_group("raft_core");
    group.throughput(Throughput::Elements(BATCH_ENTRIES as u64));
    let mut cluster = Group::elect(&[1, 2, 3], RaftConfig::new);
    let payload = Bytes::from(vec![7u8; ENTRY_BYTES]);
    group.bench_function("three_nodes_replicate_commit_apply_batch64", |b| {
        b.iter(|| {
            let now = cluster.now;
            let leader = cluster.leader();
            let before = leader.commit_index();
            for _ in 0..BATCH_ENTRIES {
                leader.propose(now, payload.clone()).unwrap();
            }
            cluster.settle();
            assert_eq!(
                cluster.leader().commit_index(),
                before + BATCH_ENTRIES as u64
            );
        })
    });
    group.finish();
}

fn snapshot_transfer(c: &mut Criterion) {
    let mut group = c.benchmark_group("raft_core");
    group.throughput(Throughput::Bytes(SNAPSHOT_BYTES as u64));
    group.sample_size(10);
    let data = Bytes::from(vec![5u8; SNAPSHOT_BYTES]);
    let config = |id| {
        let mut config = RaftConfig::new(id);
        config.trailing_entries = 0;
        config
    };
    group.bench_function("snapshot_64MiB_chunked_transfer", |b| {
        b.iter_batched(
            || {
                // A sole-voter leader with a compacted log and a pristine non-voter.
                let mut leader = RaftCore::new(config(1), Restored::default(), 1, 0);
                leader.bootstrap(membership(&[1], &[2])).unwrap();
                leader.tick(1);
                let ready = leader.ready();
                handle(&mut leader, 1, ready);
                let ready = leader.ready();
                handle(&mut leader, 1, ready);
                let applied = leader.applied_index();
                let meta = leader.snapshot_meta(applied).unwrap();
                leader.snapshot_taken(meta, data.clone());
                let follower = RaftCore::new(config(2), Restored::default(), 2, 0);
                let mut cores = BTreeMap::new();
                cores.insert(1, leader);
                cores.insert(2, follower);
                Group { cores, now: 2 }
            },
            |mut pair| {
                let now = 200;
                pair.now = now;
                pair.cores.get_mut(&1).unwrap().tick(now);
                pair.settle();
                let follower = &pair.cores[&2];
                assert!(follower.snapshot_index() >= 1, "the snapshot was installed");
                pair
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(
    benches,
    single_voter_commit,
    three_node_replication,
    snapshot_transfer
);
criterion_main!(benches);
