//! Cluster peering (issue #41), between real dev agents on their own loopback addresses:
//! tokens, establishment, reads, deletion, ACLs, snapshots and the `praetor peering`
//! commands (`http_peering`), and the peer stream — secret exchange, `ACTIVE`, `FAILING`
//! and recovery, `TERMINATED` (`stream`); exported services replicating to the peer and
//! read there with `?peer=` (`replication`).

mod http_peering;
mod replication;
mod stream;
pub(crate) mod support;
