//! Plain data shared by the Raft core, its driver and the wire: identifiers, log entries, the
//! durable hard state, cluster membership, errors and the status report.
//!
//! Everything that crosses the network or the disk derives serde so the driver can encode it
//! with rmp-serde; nothing here knows how it is encoded.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A server's identity inside the Raft group.
pub type NodeId = u64;
/// A Raft term (election epoch).
pub type Term = u64;
/// A position in the replicated log; the first entry has index 1, index 0 means "none".
pub type LogIndex = u64;
/// Monotonic milliseconds supplied by the driver. Only differences are meaningful.
pub type Millis = u64;

/// What a log entry carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EntryKind {
    /// An application command, opaque to the core.
    Normal,
    /// The empty entry a new leader appends at the start of its term so that it can commit
    /// the entries of earlier terms (Raft §5.4.2).
    Noop,
    /// A [`Membership`], encoded with [`Membership::encode`].
    Membership,
}

/// One replicated log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub index: LogIndex,
    pub term: Term,
    pub kind: EntryKind,
    pub data: Bytes,
}

impl Entry {
    /// Bytes this entry costs in a message, used for the per-message byte budget.
    pub fn size_bytes(&self) -> u64 {
        self.data.len() as u64 + 24
    }
}

/// The state a server must make durable before it answers a vote or acknowledges entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardState {
    pub term: Term,
    pub vote: Option<NodeId>,
    /// The commit index known when this was written. Persisting it is an optimization (the
    /// driver can apply up to it at restart without waiting for a leader); it may lag.
    pub commit: LogIndex,
}

/// One member of the cluster. `name` and `address` are opaque to the core.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Voters elect leaders and count towards commit quorums; non-voters only replicate.
    pub voter: bool,
    pub name: String,
    pub address: String,
}

/// The cluster configuration. It is carried by [`EntryKind::Membership`] entries and in
/// snapshots, and takes effect on a server as soon as it is appended to that server's log
/// (Ongaro's thesis, §4.1), not when it commits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    pub members: BTreeMap<NodeId, Member>,
}

/// Upper bound on members in one configuration; a decoded configuration larger than this is
/// rejected rather than trusted.
pub const MEMBERS_MAX: usize = 1024;

impl Membership {
    /// A membership whose only member is `id`, a voter (the `-dev` single-server group).
    pub fn single_voter(id: NodeId, name: &str, address: &str) -> Self {
        let mut members = BTreeMap::new();
        members.insert(
            id,
            Member {
                voter: true,
                name: name.to_string(),
                address: address.to_string(),
            },
        );
        Membership { members }
    }

    pub fn is_voter(&self, id: NodeId) -> bool {
        self.members.get(&id).is_some_and(|m| m.voter)
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.members.contains_key(&id)
    }

    pub fn voters(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members
            .iter()
            .filter(|(_, m)| m.voter)
            .map(|(id, _)| *id)
    }

    pub fn voter_count(&self) -> usize {
        self.members.values().filter(|m| m.voter).count()
    }

    /// The number of voters that makes a majority; 0 when there are no voters.
    pub fn quorum(&self) -> usize {
        let voters = self.voter_count();
        if voters == 0 {
            0
        } else {
            voters / 2 + 1
        }
    }

    /// The payload of a [`EntryKind::Membership`] entry.
    pub fn encode(&self) -> Bytes {
        Bytes::from(rmp_serde::to_vec(self).expect("a membership always encodes"))
    }

    /// Decodes a [`EntryKind::Membership`] payload. Bytes from the network are untrusted, so
    /// a malformed or oversized configuration is an error.
    pub fn decode(data: &[u8]) -> Result<Self, RaftError> {
        let membership: Membership = rmp_serde::from_slice(data)
            .map_err(|error| RaftError::InvalidMembership(format!("undecodable: {error}")))?;
        if membership.members.len() > MEMBERS_MAX {
            return Err(RaftError::InvalidMembership(format!(
                "{} members, more than {MEMBERS_MAX}",
                membership.members.len()
            )));
        }
        Ok(membership)
    }
}

/// Describes a snapshot: the last log entry it covers and the membership in force there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub last_index: LogIndex,
    pub last_term: Term,
    pub membership: Membership,
}

/// A single-server membership change (Ongaro's thesis §4.1): one at a time, each effective
/// when appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    AddVoter {
        id: NodeId,
        name: String,
        address: String,
    },
    AddNonvoter {
        id: NodeId,
        name: String,
        address: String,
    },
    /// Turns a non-voter into a voter.
    Promote { id: NodeId },
    /// Removes a member, voter or not. Removing the leader itself is allowed: it keeps
    /// leading until the change commits, then steps down.
    Remove { id: NodeId },
}

/// What the driver restores from its durable state when it (re)creates a [`RaftCore`].
///
/// [`RaftCore`]: super::RaftCore
#[derive(Clone, Debug, Default)]
pub struct Restored {
    pub hard_state: HardState,
    pub snapshot: Option<SnapshotMeta>,
    /// The durable log entries, contiguous and in order. They normally start right after the
    /// snapshot; entries at or below the snapshot's last index (kept "trailing" entries) are
    /// accepted too, as long as they agree with the snapshot's last term.
    pub entries: Vec<Entry>,
}

/// Entries the leader needs for peer `to` that are stored only in the durable log: the
/// driver reads `from..=through` back (stopping, after the first entry, before their
/// [`Entry::size_bytes`] would pass `bytes_max`) and hands them to
/// [`RaftCore::log_read_done`](super::RaftCore::log_read_done).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRead {
    pub to: NodeId,
    pub from: LogIndex,
    pub through: LogIndex,
    pub bytes_max: u64,
}

/// A piece of a snapshot being received from the leader, in order: the driver writes it
/// where the snapshot is assembled, at `offset` in its state bytes. `meta` is set on the
/// first piece (offset 0) of a snapshot: the driver then starts it afresh (a transfer that
/// restarted, or a newer snapshot, replaces what was being assembled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotChunk {
    pub meta: Option<SnapshotMeta>,
    pub offset: u64,
    pub data: Bytes,
}

/// A server's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    Follower,
    /// Running a pre-vote: asking whether it could win before disturbing anyone's term.
    PreCandidate,
    Candidate,
    Leader,
}

/// Reported in [`Ready::role_changed`](super::Ready) when the role or the known leader changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleChange {
    pub role: Role,
    pub term: Term,
    pub leader: Option<NodeId>,
}

/// A confirmed ReadIndex request: once the store has applied `index`, a read made for
/// `context` observes every write acknowledged before the request was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadState {
    pub context: u64,
    pub index: LogIndex,
}

/// How the leader currently replicates to one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationState {
    /// The peer's log position is unknown: one append in flight at a time.
    Probe,
    /// The peer is known to match: appends are pipelined up to the inflight window.
    Replicate,
    /// The peer is behind the log start and receives a snapshot.
    Snapshot,
}

/// The leader's view of one peer, for autopilot-style health reporting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    pub id: NodeId,
    pub voter: bool,
    pub match_index: LogIndex,
    pub next_index: LogIndex,
    pub state: ReplicationState,
    /// The last time (driver clock) a response from this peer arrived in this term.
    pub last_contact: Option<Millis>,
}

/// A snapshot of the core's state for status endpoints and health checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub id: NodeId,
    pub role: Role,
    pub term: Term,
    pub vote: Option<NodeId>,
    pub leader: Option<NodeId>,
    pub commit: LogIndex,
    pub applied: LogIndex,
    pub persisted: LogIndex,
    pub first_index: LogIndex,
    /// The first index held in memory; older stored entries are read back from the durable
    /// log when a peer needs them.
    pub cache_first_index: LogIndex,
    /// Bytes of the entries held in memory (`Entry::size_bytes`).
    pub cached_log_bytes: u64,
    pub last_index: LogIndex,
    pub last_term: Term,
    pub snapshot_index: LogIndex,
    pub membership: Membership,
    pub membership_index: LogIndex,
    /// Leader only: every other member's replication progress.
    pub peers: Vec<PeerStatus>,
    pub leadership_transfer_to: Option<NodeId>,
    /// Messages dropped because they were malformed or inconsistent (from a buggy or hostile
    /// peer); a non-zero value deserves a log line in the driver.
    pub messages_dropped: u64,
}

/// Why a request to the core was refused. None of these is fatal for the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RaftError {
    /// Only the leader accepts this; `leader` is the leader this server knows, if any.
    NotLeader {
        leader: Option<NodeId>,
    },
    /// The leader is handing leadership over and takes no new proposals meanwhile.
    LeadershipTransferInProgress {
        to: NodeId,
    },
    /// The leader has not yet committed an entry of its own term, which a membership change
    /// must wait for (the single-server change safety fix).
    LeaderNotReady,
    ProposalTooLarge {
        bytes: usize,
        bytes_max: usize,
    },
    /// The leader already holds this many uncommitted entries: back-pressure.
    TooManyUncommitted {
        entries_max: u64,
    },
    ReadQueueFull {
        reads_max: usize,
    },
    /// An earlier membership change at `index` has not committed yet.
    MembershipChangePending {
        index: LogIndex,
    },
    InvalidMembershipChange(String),
    InvalidMembership(String),
    /// `bootstrap` on a server that already has state.
    NotPristine,
    InvalidTransferTarget(String),
    InvalidConfig(String),
    InvalidRestoredState(String),
}

impl fmt::Display for RaftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RaftError::NotLeader { leader: Some(id) } => {
                write!(f, "not the leader (the leader is {id})")
            }
            RaftError::NotLeader { leader: None } => write!(f, "not the leader (no known leader)"),
            RaftError::LeadershipTransferInProgress { to } => {
                write!(f, "leadership is being transferred to {to}")
            }
            RaftError::LeaderNotReady => {
                write!(f, "the leader has not committed an entry of its term yet")
            }
            RaftError::ProposalTooLarge { bytes, bytes_max } => {
                write!(f, "proposal of {bytes} bytes exceeds {bytes_max} bytes")
            }
            RaftError::TooManyUncommitted { entries_max } => {
                write!(f, "more than {entries_max} uncommitted entries")
            }
            RaftError::ReadQueueFull { reads_max } => {
                write!(f, "more than {reads_max} read requests pending")
            }
            RaftError::MembershipChangePending { index } => {
                write!(
                    f,
                    "the membership change at index {index} has not committed yet"
                )
            }
            RaftError::InvalidMembershipChange(why) => {
                write!(f, "invalid membership change: {why}")
            }
            RaftError::InvalidMembership(why) => write!(f, "invalid membership: {why}"),
            RaftError::NotPristine => write!(f, "bootstrap needs a server with no state"),
            RaftError::InvalidTransferTarget(why) => {
                write!(f, "invalid leadership transfer target: {why}")
            }
            RaftError::InvalidConfig(why) => write!(f, "invalid raft config: {why}"),
            RaftError::InvalidRestoredState(why) => write!(f, "invalid restored state: {why}"),
        }
    }
}

impl std::error::Error for RaftError {}
