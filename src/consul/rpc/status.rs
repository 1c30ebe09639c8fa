//! `Status.Ping`, `Status.Leader` and `Status.Peers`: Go's `struct{}` in and out for the
//! ping, a string and a list of strings (`host:port` server addresses) for the others.

use crate::proto::msgpack::Writer;

/// `Status.Ping`'s reply: an empty struct.
pub fn ping_reply() -> Vec<u8> {
    vec![0x80]
}

/// `Status.Leader`'s reply: the leader's RPC address, empty when there is none.
pub fn leader_reply(leader: &str) -> Vec<u8> {
    let mut w = Writer::new();
    w.str(leader);
    w.into_inner()
}

/// `Status.Peers`'s reply: the Raft voters' RPC addresses.
pub fn peers_reply<'p>(peers: impl ExactSizeIterator<Item = &'p str>) -> Vec<u8> {
    let mut w = Writer::new();
    super::write_string_list(&mut w, peers, true);
    w.into_inner()
}
