//! The fast query decoder: one pass over the bytes, no allocation, for the query shape stub
//! resolvers send (RFC 1035 §4.1 with at most one OPT record, RFC 6891).
//!
//! It accepts exactly: a header with QR clear and opcode QUERY, QDCOUNT 1, ANCOUNT 0,
//! NSCOUNT 0, ARCOUNT 0 or 1; a question whose name is a plain label sequence (no compression
//! pointer); and, if ARCOUNT is 1, an OPT record owned by the root whose options fit in it.
//! Anything else that is still plausibly a valid message is `Declined` so that the general
//! decoder can judge it; bytes that can never be valid are `Malformed`.

use super::{
    flags, rtype, DecodeError, DecodePath, Edns, Query, RequestHeader, WireName, HEADER_BYTES,
    LABEL_BYTES_MAX, NAME_BYTES_MAX, OPCODE_QUERY,
};

/// Decodes `message` if it has the common single-question shape.
pub fn decode(message: &[u8]) -> Result<Query, DecodeError> {
    let header = RequestHeader::read(message).ok_or(DecodeError::TooShort)?;
    if header.flags & flags::QR != 0 {
        return Err(DecodeError::NotAQuery);
    }
    if header.opcode() != OPCODE_QUERY {
        return Err(DecodeError::Declined("opcode other than QUERY"));
    }
    let count = |at: usize| u16::from_be_bytes([message[at], message[at + 1]]);
    let (questions, answers, authorities, additionals) = (count(4), count(6), count(8), count(10));
    if questions != 1 || answers != 0 || authorities != 0 || additionals > 1 {
        return Err(DecodeError::Declined("section counts"));
    }

    // Question name: plain labels only.
    let name_start = HEADER_BYTES;
    let mut at = name_start;
    loop {
        let len = *message
            .get(at)
            .ok_or(DecodeError::Malformed("question name runs past the end"))?
            as usize;
        if len == 0 {
            at += 1;
            break;
        }
        if len & 0xC0 == 0xC0 {
            return Err(DecodeError::Declined("compressed question name"));
        }
        if len > LABEL_BYTES_MAX {
            return Err(DecodeError::Malformed("reserved label type"));
        }
        at += 1 + len;
        if at - name_start >= NAME_BYTES_MAX {
            return Err(DecodeError::Malformed("name longer than 255 bytes"));
        }
    }
    let name_end = at;
    if name_end > message.len() {
        return Err(DecodeError::Malformed("question name runs past the end"));
    }
    let fixed = message
        .get(name_end..name_end + 4)
        .ok_or(DecodeError::Malformed("question truncated"))?;
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    at = name_end + 4;

    let edns = if additionals == 1 {
        // OPT: root owner (one zero byte), type 41, class = payload size, TTL = extended
        // rcode, version, flags; then RDLENGTH bytes of options, which we do not interpret.
        let record = message
            .get(at..at + 11)
            .ok_or(DecodeError::Malformed("additional record truncated"))?;
        if record[0] != 0 || u16::from_be_bytes([record[1], record[2]]) != rtype::OPT {
            return Err(DecodeError::Declined("additional record other than OPT"));
        }
        // RFC 6891 §6.2.5: values below 512 are treated as 512.
        let udp_payload_bytes = u16::from_be_bytes([record[3], record[4]]).max(512);
        let version = record[6];
        let dnssec_ok = record[7] & 0x80 != 0;
        let rdlength = u16::from_be_bytes([record[9], record[10]]) as usize;
        at += 11 + rdlength;
        if at > message.len() {
            return Err(DecodeError::Malformed("OPT options run past the end"));
        }
        Some(Edns {
            udp_payload_bytes,
            version,
            dnssec_ok,
        })
    } else {
        None
    };
    if at != message.len() {
        return Err(DecodeError::Declined("trailing bytes"));
    }
    Ok(Query {
        id: header.id,
        flags: header.flags,
        name: WireName::from_validated(&message[name_start..name_end]),
        qtype,
        qclass,
        edns,
        path: DecodePath::Fast,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::proto::dns::class;

    /// A query as `dig` sends it: RD set, optional OPT with a COOKIE option.
    pub(crate) fn build_query(id: u16, name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&flags::RD.to_be_bytes());
        out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, edns.is_some() as u8]);
        out.extend_from_slice(WireName::from_dotted(name).unwrap().as_bytes());
        out.extend_from_slice(&qtype.to_be_bytes());
        out.extend_from_slice(&class::IN.to_be_bytes());
        if let Some(size) = edns {
            out.push(0);
            out.extend_from_slice(&rtype::OPT.to_be_bytes());
            out.extend_from_slice(&size.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0x80, 0]);
            // COOKIE option (code 10) with an 8-byte client cookie.
            out.extend_from_slice(&[0, 12, 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
        }
        out
    }

    #[test]
    fn decodes_plain_and_edns_queries() {
        let q = decode(&build_query(0xbeef, "Web.service.consul", rtype::SRV, None)).unwrap();
        assert_eq!(q.id, 0xbeef);
        assert_eq!(q.name.to_dotted(), "Web.service.consul");
        assert_eq!((q.qtype, q.qclass), (rtype::SRV, class::IN));
        assert!(q.recursion_desired());
        assert_eq!(q.edns, None);
        assert_eq!(q.path, DecodePath::Fast);

        let q = decode(&build_query(1, "web.service.consul", rtype::A, Some(1232))).unwrap();
        assert_eq!(
            q.edns,
            Some(Edns {
                udp_payload_bytes: 1232,
                version: 0,
                dnssec_ok: true
            })
        );
    }

    #[test]
    fn small_edns_sizes_read_as_512_in_both_decoders() {
        // Found by the dns_query fuzz target: the decoders disagreed on an OPT size of 0.
        let query = build_query(1, "web.service.consul", rtype::A, Some(0));
        let fast = decode(&query).unwrap();
        let general = crate::proto::dns::general::decode(&query).unwrap();
        assert_eq!(fast.edns.unwrap().udp_payload_bytes, 512);
        assert_eq!(fast.edns, general.edns);
    }

    #[test]
    fn rejects_or_declines_what_it_does_not_handle() {
        assert_eq!(decode(&[0; 11]), Err(DecodeError::TooShort));
        let mut response = build_query(1, "a", rtype::A, None);
        response[2] |= 0x80;
        assert_eq!(decode(&response), Err(DecodeError::NotAQuery));
        let mut two = build_query(1, "a", rtype::A, None);
        two[5] = 2;
        assert!(matches!(decode(&two), Err(DecodeError::Declined(_))));
        let mut cut = build_query(1, "web.service.consul", rtype::A, None);
        cut.truncate(20);
        assert!(matches!(decode(&cut), Err(DecodeError::Malformed(_))));
        let mut reserved = build_query(1, "web", rtype::A, None);
        reserved[12] = 0x40;
        assert!(matches!(decode(&reserved), Err(DecodeError::Malformed(_))));
        let mut trailing = build_query(1, "web", rtype::A, None);
        trailing.push(0);
        assert!(matches!(decode(&trailing), Err(DecodeError::Declined(_))));
        let mut bad_opt = build_query(1, "web", rtype::A, Some(4096));
        let len = bad_opt.len();
        bad_opt[len - 14] = 0xff; // RDLENGTH high byte
        assert!(matches!(decode(&bad_opt), Err(DecodeError::Malformed(_))));
    }
}
