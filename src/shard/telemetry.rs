//! What the raft thread measures around the pure replica (`RaftMetrics`): the timings and
//! state transitions hashicorp/raft reports, recorded into this thread's recorder
//! (`crate::telemetry`).

use crate::telemetry::{incr, observe, observe_since, observe_value, timing, Counter, Sample};
use std::time::{Duration, Instant};

/// Leader appends whose commit is still awaited, for `raft.commitTime`; beyond this the
/// oldest are forgotten (their commit goes untimed).
const COMMIT_TIMINGS_MAX: usize = 4096;
/// Background syncs awaiting their report, for `raft.leader.dispatchLog`.
const SYNC_TIMINGS_MAX: usize = 1024;
/// How often the leader samples its followers' last contact (`raft.leader.lastContact`).
const LAST_CONTACT_SAMPLE_MS: u64 = 1_000;

/// The monotonic clock read at most once: the instants of one raft step and of the effects
/// it produced are all "the end of that step", a few microseconds apart at most, so one read
/// serves every timer they feed.
#[derive(Default)]
struct OnceClock(Option<Instant>);

impl OnceClock {
    fn now(&mut self) -> Instant {
        *self.0.get_or_insert_with(Instant::now)
    }
}

/// What the raft thread measures around the pure replica: the timings hashicorp/raft
/// reports (`raft.commitTime`, `raft.fsm.apply`, `raft.leader.dispatchLog`, snapshots) and
/// its state transitions. The replica reads no clock, so its shell times it; every
/// bookkeeping queue here is bounded. A timer that is filtered out costs no clock read and
/// no bookkeeping, and the timers that are recorded share one clock read per step.
pub struct RaftMetrics {
    /// (last index of a leader append, when it was appended), oldest first.
    appended: std::collections::VecDeque<(u64, Instant)>,
    /// (sync sequence, when its write was handed to the sync thread), oldest first.
    syncing: std::collections::VecDeque<(u64, Instant)>,
    role: Option<crate::raft::Role>,
    snapshot_started: Option<Instant>,
    last_contact_sampled_ms: u64,
    /// The end of the last step, read when a timer first needs it.
    step_clock: OnceClock,
}

impl Default for RaftMetrics {
    fn default() -> Self {
        RaftMetrics {
            appended: std::collections::VecDeque::with_capacity(64),
            syncing: std::collections::VecDeque::with_capacity(64),
            role: None,
            snapshot_started: None,
            last_contact_sampled_ms: 0,
            step_clock: OnceClock::default(),
        }
    }
}

impl RaftMetrics {
    fn leading(replica: &crate::replica::Replica) -> bool {
        replica.raft().role() == crate::raft::Role::Leader
    }

    /// A proposal reached the leader (`raft.apply` counts them).
    pub fn proposed(&mut self, replica: &crate::replica::Replica) {
        if Self::leading(replica) {
            incr(Counter::RaftApply);
        }
    }

    /// When a step starts, if `raft.fsm.apply` is recorded (else the step is not timed).
    pub fn step_started(&self) -> Option<Instant> {
        timing(Sample::RaftFsmApply).then(Instant::now)
    }

    /// The replica took one step that started at `started` (see [`Self::step_started`])
    /// with the store at `applied_before`: times the apply, follows commits and role
    /// changes.
    pub fn stepped(
        &mut self,
        replica: &crate::replica::Replica,
        started: Option<Instant>,
        applied_before: u64,
        now_ms: u64,
    ) {
        use crate::raft::Role;
        self.step_clock = OnceClock::default();
        if let Some(started) = started {
            if replica.version().index > applied_before {
                observe(Sample::RaftFsmApply, self.step_clock.now() - started);
            }
        }
        let role = replica.raft().role();
        if self.role != Some(role) {
            let previous = self.role.replace(role);
            match role {
                Role::Leader => incr(Counter::RaftStateLeader),
                Role::Follower => incr(Counter::RaftStateFollower),
                Role::PreCandidate | Role::Candidate => {
                    if !matches!(previous, Some(Role::PreCandidate | Role::Candidate)) {
                        incr(Counter::RaftStateCandidate);
                    }
                    if previous == Some(Role::Follower) {
                        incr(Counter::RaftTransitionHeartbeatTimeout);
                    }
                }
            }
            if role != Role::Leader {
                self.appended.clear();
            }
        }
        let commit = replica.raft().commit_index();
        while self
            .appended
            .front()
            .is_some_and(|(index, _)| *index <= commit)
        {
            let (_, at) = self.appended.pop_front().expect("checked non-empty");
            observe(Sample::RaftCommitTime, self.step_clock.now() - at);
        }
        if role == Role::Leader
            && now_ms.saturating_sub(self.last_contact_sampled_ms) >= LAST_CONTACT_SAMPLE_MS
        {
            self.last_contact_sampled_ms = now_ms;
            for peer in replica.raft().status().peers {
                if let Some(at) = peer.last_contact {
                    observe(
                        Sample::RaftLeaderLastContact,
                        Duration::from_millis(now_ms.saturating_sub(at)),
                    );
                }
            }
        }
    }

    /// The leader buffered `entries` for its log.
    pub fn appending(&mut self, replica: &crate::replica::Replica, entries: &[crate::raft::Entry]) {
        let Some(last) = entries.last() else {
            return;
        };
        if !Self::leading(replica) {
            return;
        }
        observe_value(Sample::RaftLeaderDispatchNumLogs, entries.len() as u64);
        if !timing(Sample::RaftCommitTime) {
            return;
        }
        if self.appended.len() >= COMMIT_TIMINGS_MAX {
            self.appended.pop_front();
        }
        let at = self.step_clock.now();
        self.appended.push_back((last.index, at));
    }

    /// When a write and fsync on the raft thread starts, if `raft.leader.dispatchLog` is
    /// recorded.
    pub fn sync_now_started(&mut self) -> Option<Instant> {
        timing(Sample::RaftLeaderDispatchLog).then(|| self.step_clock.now())
    }

    /// A write and its fsync done on the raft thread, started at `started` (see
    /// [`Self::sync_now_started`]).
    pub fn synced_now(&mut self, replica: &crate::replica::Replica, started: Option<Instant>) {
        if let Some(started) = started.filter(|_| Self::leading(replica)) {
            observe_since(Sample::RaftLeaderDispatchLog, started);
        }
    }

    /// A write handed to the sync thread as `sequence`.
    pub fn sync_started(&mut self, sequence: u64) {
        if !timing(Sample::RaftLeaderDispatchLog) {
            return;
        }
        if self.syncing.len() >= SYNC_TIMINGS_MAX {
            self.syncing.pop_front();
        }
        let at = self.step_clock.now();
        self.syncing.push_back((sequence, at));
    }

    /// The sync thread made every write through `through` durable.
    pub fn synced_through(&mut self, through: u64) {
        let mut clock = OnceClock::default();
        while self.syncing.front().is_some_and(|(s, _)| *s <= through) {
            let (_, at) = self.syncing.pop_front().expect("checked non-empty");
            observe(Sample::RaftLeaderDispatchLog, clock.now() - at);
        }
    }

    /// A snapshot was asked for; `created` is when capturing the version began.
    pub fn snapshot_started(&mut self, created: Instant) {
        observe_since(Sample::RaftSnapshotCreate, created);
        self.snapshot_started = Some(created);
    }

    /// The snapshot asked for is durable.
    pub fn snapshot_written(&mut self) {
        if let Some(started) = self.snapshot_started.take() {
            observe_since(Sample::RaftSnapshotTakeSnapshot, started);
        }
    }
}
