//! The replica: everything the raft thread decides, as a pure state machine.
//!
//! [`Replica`] wraps the Raft core ([`crate::raft::RaftCore`]) and the authoritative store
//! ([`crate::store::Tables`]) and owns the bookkeeping between them: handling each `Ready`
//! in the order the core documents, group commit and the hand-off of fsyncs to a sync thread
//! (which writes still owe messages and a `persisted_through` report), routing proposal and
//! read results back to the shard that asked, the publish-before-queue rule, and the
//! leader's duties (session TTL expiry, tombstone reaping, bootstrap-expect, membership
//! reconciliation, snapshots).
//!
//! It does no I/O, reads no clock, starts no thread and touches no atomic. The driver (the
//! raft thread in the runtime, or the simulator in `tests/sim`) feeds it time and
//! [`Input`]s through [`Replica::step`] and carries out the [`Effect`]s it accumulates, in
//! order, draining them with [`Replica::drain_effects`] — the shape of raft-rs's `Ready` and
//! foca's accumulating runtime one layer up. Each effect's documentation says what it
//! requires of the effects before it; the order is the contract:
//!
//! - a write is buffered by [`Effect::Append`] and becomes durable at the next
//!   [`Effect::SyncNow`] (on the driver's thread) or [`Effect::SyncInBackground`] (reported
//!   back as [`Input::Synced`]); what must follow durability (votes, acknowledgements, the
//!   core's `persisted_through`) is emitted only after the `SyncNow`, or held until the
//!   matching `Synced` arrives;
//! - [`Effect::PublishIndex`] precedes the [`Effect::Deliver`]s of the batch at that index:
//!   a shard may acknowledge a write as soon as its batch is queued, and a read on another
//!   shard must then find the published index moved (`Shard::catch_up`);
//! - a storage failure of any effect must stop the server (a server that cannot persist
//!   must not keep acknowledging); [`Fatal`] is how the replica itself says so.
//!
//! Invariants, asserted at the seams (on in the `ci` profile): the applied index never
//! exceeds the commit index; the commit index and the published index never go backwards;
//! every `Ready` taken from the core is advanced exactly once; syncs complete in sequence
//! order; a proposal is answered exactly once.

mod autopilot;
mod duties;
mod result;
mod session_timers;
mod shapes;
mod state;

#[cfg(test)]
mod tests;

use crate::raft::{
    Entry, HardState, LogIndex, LogRead, Message, NodeId, RaftConfig, SnapshotChunk, SnapshotMeta,
};
use crate::store::StoreVersion;
use crate::store::Tables;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

pub use self::autopilot::DEAD_SERVER_GRACE_MS;
pub use self::result::ProposalResult;
pub use self::session_timers::SessionTimers;
pub use self::shapes::{
    request_id, shard_of_request, AppliedBatch, AutopilotHealth, ClusterStatus, OperatorOp,
    PeerHealth, RaftServer, ServerHealth, ServerInfo, REQUEST_SEQUENCE_BITS,
};
pub use self::state::Replica;

/// How long a KV tombstone lives before the leader reaps it (Consul's `tombstone_ttl`).
pub const TOMBSTONE_TTL_MS: u64 = 15 * 60 * 1000;
/// How often the leader samples the index for tombstone reaping (Consul's granularity).
pub const TOMBSTONE_GRANULARITY_MS: u64 = 30 * 1000;
/// How often the leader re-checks membership against gossip and refreshes peer health.
pub const RECONCILE_INTERVAL_MS: u64 = 500;

/// The two clocks of one step, read once by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now {
    /// The raft thread's monotonic clock in milliseconds: the core's ticks, leases, session
    /// timers and the leader's periodic duties run on it. Never decreases between steps.
    pub monotonic_ms: u64,
    /// The wall clock in Unix milliseconds, stamped on every entry this server proposes so
    /// that time-dependent state (lock-delays) is computed from the same bytes everywhere.
    /// Read only by `Start`, `Propose` and `Tick` (which proposes the leader's own
    /// commands): the driver need not refresh it for other inputs.
    pub unix_ms: u64,
}

/// Everything the replica learns from the world.
#[derive(Debug)]
pub enum Input {
    /// The driver is running: first input of every replica. Processes what restoring the
    /// log made ready and publishes the initial status.
    Start,
    /// A shard's proposal, an encoded store command; answered with a [`ProposalResult`]
    /// routed to the shard named by `request_id`.
    Propose {
        request_id: u64,
        payload: Bytes,
    },
    /// A consistent read: answered `Applied` once a quorum confirmed leadership and the
    /// store applied everything committed before it. Reads arriving between two `Tick`s
    /// share one quorum round.
    ReadIndex {
        request_id: u64,
    },
    /// A Raft message from a peer.
    Message {
        from: NodeId,
        message: Message,
    },
    /// The servers gossip currently knows, including this one.
    Servers(Vec<ServerInfo>),
    Operator {
        request_id: u64,
        op: OperatorOp,
    },
    /// Every write up to [`Effect::SyncInBackground`]'s `sequence` number `through` is
    /// durable.
    Synced {
        through: u64,
    },
    /// The snapshot asked for by [`Effect::WriteSnapshot`] is durable; `data` is its state,
    /// kept to send to lagging followers.
    SnapshotWritten {
        meta: SnapshotMeta,
        data: Bytes,
    },
    /// The snapshot an [`Effect::InstallSnapshot`] stored, decoded (or why it did not
    /// decode), and its state bytes as stored, which the core sends to lagging followers.
    SnapshotRestored {
        meta: SnapshotMeta,
        tables: Result<Box<Tables>, String>,
        data: Bytes,
    },
    /// The entries an [`Effect::ReadLog`] asked for, read back from the durable log, or why
    /// they could not be.
    LogRead {
        read: LogRead,
        entries: Result<Vec<Entry>, String>,
    },
    /// The end of one batch of inputs, and at least every few tens of milliseconds: ticks
    /// the core, starts the quorum round for the reads that arrived, handles what is ready,
    /// delivers refusals, and runs the leader's periodic duties.
    Tick,
}

/// What the replica asks the world to do, in order. See the module documentation for the
/// ordering contract.
#[derive(Debug)]
pub enum Effect {
    /// Send `message` to peer `to` now. It needs nothing durable beyond what the effects
    /// before it made durable.
    Send { to: NodeId, message: Message },
    /// Buffer one log write: drop durable entries at and above `truncate_from`, then record
    /// `hard_state` (before the entries, so a torn write never keeps entries without the
    /// term they carry), then append `entries`. Nothing is durable until a later
    /// [`Effect::SyncNow`] or [`Effect::SyncInBackground`] covers it.
    Append {
        hard_state: Option<HardState>,
        truncate_from: Option<LogIndex>,
        entries: Vec<Entry>,
    },
    /// Write everything buffered and make it, and every earlier write, durable before
    /// carrying out the next effect: the effects after this one rely on it.
    SyncNow,
    /// Write everything buffered now and have its fsync done off this thread; report
    /// [`Input::Synced`] with this `sequence` (or a later one) once it and every earlier
    /// write are durable. Sequence numbers increase by one per sync, `SyncNow` included.
    SyncInBackground { sequence: u64 },
    /// Write a piece of the snapshot being received from the leader where it is assembled,
    /// at its offset in the state bytes; a piece with `meta` starts the snapshot afresh.
    SnapshotChunk(SnapshotChunk),
    /// The snapshot assembled from the pieces is complete: store it atomically, delete log
    /// segments whose entries are all at or below its index, then decode it (off the
    /// thread if convenient) and report [`Input::SnapshotRestored`]. The effects before it
    /// made the log consistent with it: every earlier write, and a truncation of everything
    /// above its index, is durable.
    InstallSnapshot { meta: SnapshotMeta },
    /// Serialize `version` (at `meta.last_index`) into a durable snapshot, off the thread,
    /// then report [`Input::SnapshotWritten`]. At most one is outstanding.
    WriteSnapshot {
        meta: SnapshotMeta,
        version: StoreVersion,
    },
    /// Delete log segments whose entries are all at or below `through`: a durable snapshot
    /// covers them and the trailing entries are kept above it.
    CompactLog { through: LogIndex },
    /// Read the stored entries `read` names back from the durable log and report them with
    /// [`Input::LogRead`] (as soon as convenient; other inputs may come first). They are
    /// durable already: no earlier effect needs to complete first.
    ReadLog(LogRead),
    /// Make `index` the published index the shards compare against. Emitted before the
    /// [`Effect::Deliver`]s of the batch at that index; never decreases.
    PublishIndex { index: LogIndex },
    /// Queue `batch` and this shard's `results` to shard `shard`; wake it when `results`
    /// is not empty. The batch's index was published by an earlier effect.
    Deliver {
        shard: usize,
        batch: Arc<AppliedBatch>,
        results: Vec<(u64, ProposalResult)>,
    },
    /// Wake the shards that have parked queries: the published index moved past a batch
    /// with changes.
    RingWatchers,
    /// Send this status to every shard.
    Status(Arc<ClusterStatus>),
    /// The leader lease ends at `until_ms` on the monotonic clock; 0 when this server holds
    /// none.
    Lease { until_ms: u64 },
    /// The leader was last heard from (or this server led) at `at_ms`.
    LeaderContact { at_ms: u64 },
    /// Point the transport at exactly these peers (raft id → RPC address).
    Peers(BTreeMap<NodeId, String>),
    /// A line for the operator's log.
    Log { level: log::Level, text: String },
}

/// The replica cannot go on: state it must trust does not decode. The driver stops the
/// server; every server fails the same way on the same bytes, so stopping cannot make
/// servers diverge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fatal {
    pub what: String,
}

impl Fatal {
    fn new(what: &str, error: impl fmt::Display) -> Fatal {
        Fatal {
            what: format!("{what}: {error}"),
        }
    }
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

/// Everything fixed about one replica.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// The core's tunables; `raft.id` is this server's raft id.
    pub raft: RaftConfig,
    /// This node's UUID (shown by the operator endpoints).
    pub node_id: String,
    pub node_name: String,
    /// This server's RPC address as peers reach it, `ip:port`.
    pub rpc_address: String,
    pub datacenter: String,
    /// Form a one-voter group if the log is pristine (`-dev`, `-bootstrap`, expect 1).
    pub bootstrap_single: bool,
    /// `bootstrap_expect` when > 1: bootstrap once that many servers are seen.
    pub bootstrap_expect: u32,
    /// Applied entries after which a snapshot is taken (`raft_snapshot_threshold`).
    pub snapshot_threshold_entries: u64,
    /// Shards that receive applied batches and results.
    pub shard_count: usize,
    /// `acl.enabled`: the leader initializes the ACL tables on taking office and reaps
    /// expired tokens.
    pub acl_enabled: bool,
    /// `acl.tokens.initial_management` as `(AccessorID, SecretID)`; the shell draws the
    /// AccessorID once at start (the replica takes no entropy).
    pub acl_initial_management: Option<(String, String)>,
    /// The `autopilot` stanza: what the first leader writes as the replicated autopilot
    /// configuration, and what autopilot follows until it is written.
    pub autopilot: crate::store::autopilot::AutopilotConfig,
}

/// The durable state a replica starts from.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    pub hard_state: HardState,
    /// The log after the snapshot, contiguous, in index order.
    pub entries: Vec<Entry>,
    /// The newest snapshot: its metadata and the encoded store.
    pub snapshot: Option<(SnapshotMeta, Bytes)>,
}
