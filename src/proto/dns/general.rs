//! The general query decoder: hickory-proto's full message parser, for every query the fast
//! path declines (compressed question names, several additional records, TSIG, opcodes other
//! than QUERY, trailing bytes). It costs an allocation-heavy parse, which only unusual
//! clients pay; see ARCHITECTURE.md for the measured cost of each path.

use super::{flags, DecodeError, DecodePath, Edns, Query, RequestHeader, WireName, OPCODE_QUERY};
use hickory_proto::op::Message;

/// Decodes any well-formed single-question query.
pub fn decode(message: &[u8]) -> Result<Query, DecodeError> {
    let header = RequestHeader::read(message).ok_or(DecodeError::TooShort)?;
    if header.flags & flags::QR != 0 {
        return Err(DecodeError::NotAQuery);
    }
    if header.opcode() != OPCODE_QUERY {
        return Err(DecodeError::NotImplemented(
            "only standard queries are supported",
        ));
    }
    let parsed =
        Message::from_vec(message).map_err(|_| DecodeError::Malformed("unparseable message"))?;
    // RFC 9619: a query carries exactly one question.
    let [question] = parsed.queries.as_slice() else {
        return Err(DecodeError::Malformed("QDCOUNT must be 1"));
    };
    let name = WireName::from_labels(question.name.iter())?;
    let edns = parsed.edns.as_ref().map(|edns| Edns {
        udp_payload_bytes: edns.max_payload(),
        version: edns.version(),
        dnssec_ok: edns.flags().dnssec_ok,
    });
    Ok(Query {
        id: header.id,
        flags: header.flags,
        name,
        qtype: u16::from(question.query_type),
        qclass: u16::from(question.query_class),
        edns,
        path: DecodePath::General,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::dns::fast::tests::build_query;
    use crate::proto::dns::rtype;

    #[test]
    fn decodes_compressed_question_names() {
        // The only earlier bytes a question name can point at are the header's: byte 11 (the
        // low byte of ARCOUNT, zero) reads as the root label, so "web" + pointer(11) is "web.".
        let mut message = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        message.extend_from_slice(b"\x03web\xc0\x0b");
        message.extend_from_slice(&rtype::A.to_be_bytes());
        message.extend_from_slice(&1u16.to_be_bytes());
        let q = crate::proto::dns::decode(&message).unwrap();
        assert_eq!(q.path, DecodePath::General);
        assert_eq!(q.name.to_dotted(), "web");
        assert_eq!(q.qtype, rtype::A);
    }

    #[test]
    fn refuses_bad_shapes() {
        let mut two = build_query(7, "a.consul", rtype::A, None);
        two[5] = 2;
        assert!(matches!(decode(&two), Err(DecodeError::Malformed(_))));
        let mut zero = build_query(7, "a.consul", rtype::A, None);
        zero[5] = 0;
        assert!(matches!(
            crate::proto::dns::decode(&zero),
            Err(DecodeError::Malformed(_))
        ));
        let mut notify = build_query(7, "a.consul", rtype::SOA, None);
        notify[2] |= 4 << 3;
        assert!(matches!(
            crate::proto::dns::decode(&notify),
            Err(DecodeError::NotImplemented(_))
        ));
    }
}
