//! `Status.Ping`, `Status.Leader` and `Status.Peers`: Go's `struct{}` in and out for the
//! ping, a string and a list of strings (`host:port` server addresses) for the others.
//! Their requests are `DCSpecificRequest`s ([`super::catalog::DcSpecificRequest`]), which
//! a server that only answers for its own datacenter need not read.

use crate::proto::msgpack::{Reader, WireError, Writer};

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

/// `Status.Leader`'s reply, as a client reads it.
pub fn read_leader_reply(body: &[u8]) -> Result<&str, WireError> {
    Reader::new(body).str()
}

/// A `[]string` reply (`Status.Peers`, `Catalog.ListDatacenters`), as a client reads it;
/// nil is an empty list.
pub fn read_string_list_reply(body: &[u8]) -> Result<Vec<&str>, WireError> {
    super::string_list(&mut Reader::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_read_back_as_written() {
        assert_eq!(
            read_leader_reply(&leader_reply("10.0.0.1:8300")),
            Ok("10.0.0.1:8300")
        );
        assert_eq!(read_leader_reply(&leader_reply("")), Ok(""));
        let peers = ["10.0.0.1:8300", "10.0.0.2:8300"];
        assert_eq!(
            read_string_list_reply(&peers_reply(peers.iter().copied())),
            Ok(peers.to_vec())
        );
        // No voters is Go's nil slice, which reads as an empty list.
        assert_eq!(
            read_string_list_reply(&peers_reply(std::iter::empty())),
            Ok(Vec::new())
        );
        assert!(read_leader_reply(&[0x91]).is_err());
    }
}
