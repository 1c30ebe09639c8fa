//! Tunables of the Raft core, every one with its unit in its name, and their validation.

use super::types::{Millis, NodeId, RaftError};

/// The default of [`RaftConfig::log_cache_bytes`] (`raft_log_cache_bytes`): 64 MiB.
pub const LOG_CACHE_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

/// Configuration of one [`RaftCore`](super::RaftCore).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftConfig {
    pub id: NodeId,
    /// Base election timeout; each wait is drawn from `[t, 2t)`. A follower also refuses to
    /// vote for an ordinary candidate for this long after hearing from a leader.
    pub election_timeout_ms: Millis,
    pub heartbeat_interval_ms: Millis,
    /// How long after the commit index moves a leader waits before telling followers with an
    /// AppendEntries of its own (0 = at once). Under load the next append carries it anyway,
    /// so a short wait saves one message and one acknowledgement per peer per commit; it
    /// delays only what followers serve as stale reads, by at most this plus a tick.
    pub commit_notice_delay_ms: Millis,
    /// How long a quorum acknowledgement keeps the leader's lease; must be below the election
    /// timeout, the margin covering clock-rate drift between servers.
    pub lease_ms: Millis,
    pub pre_vote: bool,
    /// Leaders step down without a recently active quorum, followers ignore disruptive
    /// candidates while they hear from a leader, and the leader lease is available.
    pub check_quorum: bool,
    /// Entries per AppendEntries message.
    pub append_entries_max: usize,
    /// Payload bytes per AppendEntries message (at least one entry is always sent).
    pub append_bytes_max: u64,
    /// AppendEntries messages in flight per peer while replicating (the pipelining window).
    pub inflight_appends_max: usize,
    pub snapshot_chunk_bytes: u64,
    /// Snapshot chunks in flight per peer (a window, not stop-and-wait).
    pub snapshot_inflight_chunks_max: u64,
    /// A snapshot transfer with no acknowledged progress for this long restarts from the last
    /// acknowledged offset (a chunk was lost).
    pub snapshot_retransmit_ms: Millis,
    /// The largest snapshot a follower accepts from a leader.
    pub snapshot_bytes_max: u64,
    /// Entries kept below a snapshot so slightly lagging peers catch up from the log.
    pub trailing_entries: u64,
    /// The most log entry bytes (`Entry::size_bytes`) held in memory for peers that have not
    /// acknowledged them yet. Entries every peer holds leave memory once applied; older ones
    /// stay in the durable log and are read back when a lagging peer needs them.
    pub log_cache_bytes: u64,
    /// The largest single proposal.
    pub proposal_bytes_max: usize,
    /// The leader refuses proposals while this many entries are uncommitted (back-pressure).
    pub uncommitted_entries_max: u64,
    /// ReadIndex requests waiting for confirmation.
    pub read_requests_pending_max: usize,
}

impl RaftConfig {
    /// The defaults for server `id`.
    pub fn new(id: NodeId) -> Self {
        RaftConfig {
            id,
            election_timeout_ms: 1000,
            heartbeat_interval_ms: 100,
            commit_notice_delay_ms: 5,
            lease_ms: 900,
            pre_vote: true,
            check_quorum: true,
            append_entries_max: 4096,
            append_bytes_max: 1024 * 1024,
            inflight_appends_max: 64,
            snapshot_chunk_bytes: 1024 * 1024,
            snapshot_inflight_chunks_max: 16,
            snapshot_retransmit_ms: 1000,
            snapshot_bytes_max: 16 * 1024 * 1024 * 1024,
            trailing_entries: 10240,
            log_cache_bytes: LOG_CACHE_BYTES_DEFAULT,
            proposal_bytes_max: 8 * 1024 * 1024,
            uncommitted_entries_max: 65536,
            read_requests_pending_max: 4096,
        }
    }

    pub fn validate(&self) -> Result<(), RaftError> {
        let fail = |why: &str| Err(RaftError::InvalidConfig(why.to_string()));
        if self.id == 0 {
            return fail("id must not be 0 (0 means \"none\" on the wire)");
        }
        if self.heartbeat_interval_ms == 0 {
            return fail("heartbeat_interval_ms must be positive");
        }
        if self.commit_notice_delay_ms >= self.heartbeat_interval_ms {
            return fail("commit_notice_delay_ms must be below heartbeat_interval_ms");
        }
        if self.election_timeout_ms <= self.heartbeat_interval_ms {
            return fail("election_timeout_ms must exceed heartbeat_interval_ms");
        }
        if self.lease_ms >= self.election_timeout_ms {
            return fail("lease_ms must be below election_timeout_ms");
        }
        if self.append_entries_max == 0 || self.append_bytes_max == 0 {
            return fail("append_entries_max and append_bytes_max must be positive");
        }
        if self.inflight_appends_max == 0 {
            return fail("inflight_appends_max must be positive");
        }
        if self.snapshot_chunk_bytes == 0 || self.snapshot_inflight_chunks_max == 0 {
            return fail("snapshot_chunk_bytes and snapshot_inflight_chunks_max must be positive");
        }
        if self.snapshot_retransmit_ms == 0 {
            return fail("snapshot_retransmit_ms must be positive");
        }
        if self.uncommitted_entries_max == 0 || self.read_requests_pending_max == 0 {
            return fail("uncommitted_entries_max and read_requests_pending_max must be positive");
        }
        Ok(())
    }
}
