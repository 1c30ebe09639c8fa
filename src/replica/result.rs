//! How a request to the raft thread ends: [`ProposalResult`].
//!
//! Every proposal, ReadIndex request and operator request ends in exactly one variant. The
//! variants differ in what they did to the replicated state, which is what a caller needs to
//! know before retrying: a write that was never appended may be sent again, a write whose
//! leader was deposed before it committed may already be in the log and may still commit.
//! The text of each variant is the message Consul gives for the same situation; the API
//! layer alone turns a variant into an HTTP status.

use crate::store::CommandResult;
use std::fmt;

/// The end of one request to the raft thread.
#[derive(Clone, Debug, PartialEq)]
pub enum ProposalResult {
    /// The entry holding the request was committed and applied on this server; the store's
    /// answer is inside (which may itself be a refusal with Consul's text, e.g. a failed
    /// check-and-set). For a ReadIndex request: a quorum confirmed this server's leadership
    /// and the store has applied everything committed before the request. For an operator
    /// request: the raft thread carried it out (a membership change proposed, a transfer
    /// started, a session timer reset) and answers with the outcome.
    ///
    /// Not to be retried blindly: the write happened.
    Applied(CommandResult),
    /// This server does not lead (or is handing leadership over), so the request never
    /// reached the log. It did not and will not happen: retrying, here once a leader is
    /// known or on the leader, is safe.
    NotLeader,
    /// The request was appended to the log, but this server lost leadership before the entry
    /// was applied here (or another leader's entry took its index). The next leader decides:
    /// the write may or may not have happened. Retrying is safe only for idempotent writes
    /// (a plain PUT of the same value; not a check-and-set or a lock acquisition whose first
    /// attempt may have succeeded).
    LeadershipLost,
    /// Refused before reaching the log because too much is already in flight (uncommitted
    /// entries on the leader, pending ReadIndex requests, requests waiting on this shard). It
    /// did not happen; retrying after a pause is safe.
    Overloaded,
    /// The agent is stopping and the request was never handed to the log. It did not happen;
    /// retrying against another server is safe.
    ShuttingDown,
    /// The encoded request is larger than one log entry may be (`bytes` > `bytes_max`). It
    /// did not happen, and retrying the same request fails the same way.
    TooLarge { bytes: usize, bytes_max: usize },
}

impl ProposalResult {
    /// Whether the request certainly did not change the replicated state, so that sending it
    /// again cannot apply it twice.
    pub fn certainly_not_applied(&self) -> bool {
        match self {
            ProposalResult::NotLeader
            | ProposalResult::Overloaded
            | ProposalResult::ShuttingDown
            | ProposalResult::TooLarge { .. } => true,
            ProposalResult::Applied(_) | ProposalResult::LeadershipLost => false,
        }
    }

    /// The store's answer, or the reason there is none as Consul words it: for callers that
    /// only report the outcome (the agent's anti-entropy logs it and tries again later).
    pub fn into_command_result(self) -> CommandResult {
        match self {
            ProposalResult::Applied(result) => result,
            other => CommandResult::Error(other.to_string()),
        }
    }
}

impl fmt::Display for ProposalResult {
    /// Consul's message for each outcome (`structs.ErrNoLeader`, raft's `ErrLeadershipLost`
    /// and `ErrRaftShutdown`, the rate limiter's `ErrRetryLater`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProposalResult::Applied(result) => f.write_str(result.refusal().unwrap_or("applied")),
            ProposalResult::NotLeader => f.write_str("No cluster leader"),
            ProposalResult::LeadershipLost => f.write_str("leadership lost while committing log"),
            ProposalResult::Overloaded => f.write_str(
                "rate limit exceeded for operation that can only be performed by the leader, \
                 try again later",
            ),
            ProposalResult::ShuttingDown => f.write_str("raft is already shutdown"),
            ProposalResult::TooLarge { bytes, bytes_max } => {
                write!(
                    f,
                    "request of {bytes} bytes exceeds the {bytes_max} bytes of one log entry"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_applied_and_leadership_lost_may_have_changed_the_state() {
        let unchanged = [
            ProposalResult::NotLeader,
            ProposalResult::Overloaded,
            ProposalResult::ShuttingDown,
            ProposalResult::TooLarge {
                bytes: 2,
                bytes_max: 1,
            },
        ];
        for result in &unchanged {
            assert!(result.certainly_not_applied(), "{result:?}");
        }
        assert!(!ProposalResult::LeadershipLost.certainly_not_applied());
        assert!(!ProposalResult::Applied(CommandResult::Bool(false)).certainly_not_applied());
    }

    #[test]
    fn refusals_read_as_consul_words_them() {
        assert_eq!(
            ProposalResult::NotLeader.into_command_result(),
            CommandResult::Error("No cluster leader".into())
        );
        assert_eq!(
            ProposalResult::Applied(CommandResult::Bool(true)).into_command_result(),
            CommandResult::Bool(true)
        );
        assert_eq!(
            ProposalResult::LeadershipLost.to_string(),
            "leadership lost while committing log"
        );
    }
}
