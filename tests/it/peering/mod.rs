//! Cluster peering, part 1 (issue #41): tokens, establishment, reads, deletion, ACLs,
//! snapshots and the `praetor peering` commands, between real dev agents on their own
//! loopback addresses. The peer stream is part 2: nothing here expects `ACTIVE`.

mod http_peering;
mod support;
