//! DNS wire format for the `dns` scenario: one-question queries out, a header check in.
//!
//! A load generator needs to match an answer to its query (ID), know whether it succeeded
//! (RCODE, answer count) and whether it was truncated (TC). Records are not decoded. Pure and
//! allocation-free after the query template is built.

/// Largest DNS message accepted over TCP (the 16-bit length prefix allows no more).
pub const DNS_MESSAGE_BYTES_MAX: usize = 65_535;
/// Header length in bytes.
const HEADER_BYTES: usize = 12;
/// Longest domain name in presentation form (RFC 1035 §2.3.4).
const NAME_BYTES_MAX: usize = 253;

/// Query types the scenario can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryType {
    A,
    Aaaa,
    Srv,
    Any,
    Soa,
    Ns,
    Txt,
    Ptr,
}

impl QueryType {
    pub fn code(self) -> u16 {
        match self {
            QueryType::A => 1,
            QueryType::Ns => 2,
            QueryType::Soa => 6,
            QueryType::Ptr => 12,
            QueryType::Txt => 16,
            QueryType::Aaaa => 28,
            QueryType::Srv => 33,
            QueryType::Any => 255,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            QueryType::A => "A",
            QueryType::Aaaa => "AAAA",
            QueryType::Srv => "SRV",
            QueryType::Any => "ANY",
            QueryType::Soa => "SOA",
            QueryType::Ns => "NS",
            QueryType::Txt => "TXT",
            QueryType::Ptr => "PTR",
        }
    }

    pub fn parse(text: &str) -> Option<QueryType> {
        Some(match text.to_ascii_uppercase().as_str() {
            "A" => QueryType::A,
            "AAAA" => QueryType::Aaaa,
            "SRV" => QueryType::Srv,
            "ANY" => QueryType::Any,
            "SOA" => QueryType::Soa,
            "NS" => QueryType::Ns,
            "TXT" => QueryType::Txt,
            "PTR" => QueryType::Ptr,
            _ => return None,
        })
    }
}

/// Encodes a standard query (RD set) for `name`/`qtype` with ID 0; callers patch the ID with
/// [`set_id`]. With `edns_udp_bytes`, an OPT record advertising that UDP payload size is added.
pub fn encode_query(
    name: &str,
    qtype: QueryType,
    edns_udp_bytes: Option<u16>,
) -> Result<Vec<u8>, String> {
    let name = name.trim_end_matches('.');
    if name.len() > NAME_BYTES_MAX {
        return Err(format!("query name longer than {NAME_BYTES_MAX} bytes"));
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + name.len() + 2 + 4 + 11);
    let additional: u16 = if edns_udp_bytes.is_some() { 1 } else { 0 };
    out.extend_from_slice(&[0, 0, 0x01, 0x00, 0, 1, 0, 0, 0, 0]);
    out.extend_from_slice(&additional.to_be_bytes());
    if !name.is_empty() {
        for label in name.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(format!("bad label {label:?} in query name {name:?}"));
            }
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
    }
    out.push(0);
    out.extend_from_slice(&qtype.code().to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes()); // class IN
    if let Some(udp_bytes) = edns_udp_bytes {
        // OPT pseudo-record: root name, type 41, class = UDP payload size, TTL 0, no options.
        out.push(0);
        out.extend_from_slice(&41u16.to_be_bytes());
        out.extend_from_slice(&udp_bytes.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    Ok(out)
}

#[inline]
pub fn set_id(message: &mut [u8], id: u16) {
    message[..2].copy_from_slice(&id.to_be_bytes());
}

/// The header fields of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerHeader {
    pub id: u16,
    pub rcode: u8,
    pub truncated: bool,
    pub answers: u16,
}

/// Reads the header of a response. Errors when the message is shorter than a header or is
/// not a response (QR clear).
pub fn parse_answer_header(message: &[u8]) -> Result<AnswerHeader, &'static str> {
    if message.len() < HEADER_BYTES {
        return Err("DNS message shorter than its header");
    }
    if message[2] & 0x80 == 0 {
        return Err("DNS message is not a response");
    }
    Ok(AnswerHeader {
        id: u16::from_be_bytes([message[0], message[1]]),
        rcode: message[3] & 0x0f,
        truncated: message[2] & 0x02 != 0,
        answers: u16::from_be_bytes([message[6], message[7]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_an_a_query() {
        let mut q = encode_query("web.service.consul.", QueryType::A, None).unwrap();
        set_id(&mut q, 0xbeef);
        let mut expected = vec![0xbe, 0xef, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        expected.extend_from_slice(b"\x03web\x07service\x06consul\x00\x00\x01\x00\x01");
        assert_eq!(q, expected);
    }

    #[test]
    fn encodes_srv_with_edns() {
        let q = encode_query("web.service.consul", QueryType::Srv, Some(4096)).unwrap();
        assert_eq!(&q[10..12], &[0, 1]); // ARCOUNT
        let tail = &q[q.len() - 11..];
        assert_eq!(tail, &[0, 0, 41, 0x10, 0x00, 0, 0, 0, 0, 0, 0]);
        let question_end = q.len() - 11;
        assert_eq!(&q[question_end - 4..question_end], &[0, 33, 0, 1]);
    }

    #[test]
    fn rejects_bad_names() {
        assert!(encode_query("a..b", QueryType::A, None).is_err());
        assert!(encode_query(&"x".repeat(64), QueryType::A, None).is_err());
        assert!(encode_query(&"abc.".repeat(70), QueryType::A, None).is_err());
        assert_eq!(
            encode_query(".", QueryType::Ns, None).unwrap().len(),
            12 + 1 + 4
        );
    }

    #[test]
    fn parses_answer_headers() {
        let ok = [0x12, 0x34, 0x85, 0x80, 0, 1, 0, 3, 0, 0, 0, 0];
        assert_eq!(
            parse_answer_header(&ok),
            Ok(AnswerHeader {
                id: 0x1234,
                rcode: 0,
                truncated: false,
                answers: 3
            })
        );
        let nx_tc = [0, 1, 0x87, 0x83, 0, 1, 0, 0, 0, 0, 0, 0];
        let h = parse_answer_header(&nx_tc).unwrap();
        assert_eq!((h.rcode, h.truncated), (3, true));
        assert!(parse_answer_header(&[0; 11]).is_err());
        assert!(parse_answer_header(&[0; 12]).is_err());
    }

    #[test]
    fn query_types_round_trip() {
        for t in ["A", "aaaa", "SRV", "any", "SOA", "NS", "TXT", "PTR"] {
            let q = QueryType::parse(t).unwrap();
            assert_eq!(q.name(), t.to_ascii_uppercase());
        }
        assert_eq!(QueryType::parse("MX"), None);
    }
}
