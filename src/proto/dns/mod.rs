//! DNS messages: decoding queries and writing responses, with explicit limits.
//!
//! Two decoders produce the same [`Query`]:
//! - [`fast::decode`] handles the shape nearly every stub resolver sends — one question with
//!   an uncompressed name, no answer or authority records, at most one OPT record — by walking
//!   the bytes once without allocating.
//! - [`general::decode`] handles everything else through hickory-proto's full message parser
//!   (compressed question names, unusual section counts, TSIG and other additional records).
//!
//! [`decode`] tries the fast path first and falls back when it declines. Responses are
//! written by hand ([`writer`]): the resolver's answers are encoded once, cached, and spliced
//! after an echo of the question, so names are compressed against the question at offset 12.
//!
//! Nothing here knows about the store, the runtime, or time. Every length read from the wire is
//! bounds-checked; malformed input yields a [`DecodeError`], never a panic.

pub mod fast;
pub mod general;
pub mod writer;

/// Size of the fixed message header.
pub const HEADER_BYTES: usize = 12;
/// Largest encoded domain name (RFC 1035 §2.3.4), length bytes included.
pub const NAME_BYTES_MAX: usize = 255;
/// Largest label (RFC 1035 §2.3.4).
pub const LABEL_BYTES_MAX: usize = 63;
/// Largest DNS message (the TCP length prefix is 16 bits).
pub const MESSAGE_BYTES_MAX: usize = 65_535;
/// UDP payload every resolver accepts without EDNS (RFC 1035 §4.2.1).
pub const UDP_PAYLOAD_DEFAULT_BYTES: usize = 512;
/// Size of an OPT record without options: root name, type, class, TTL, RDLENGTH.
pub const OPT_RECORD_BYTES: usize = 11;

/// Record types praetor reads or writes.
pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const PTR: u16 = 12;
    pub const TXT: u16 = 16;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const OPT: u16 = 41;
    pub const IXFR: u16 = 251;
    pub const AXFR: u16 = 252;
    pub const MAILB: u16 = 253;
    pub const MAILA: u16 = 254;
    pub const ANY: u16 = 255;
}

/// Record classes.
pub mod class {
    pub const IN: u16 = 1;
    pub const CH: u16 = 3;
    pub const ANY: u16 = 255;
}

/// Response codes (the low four bits live in the header; BADVERS needs the OPT record).
pub mod rcode {
    pub const NOERROR: u16 = 0;
    pub const FORMERR: u16 = 1;
    pub const SERVFAIL: u16 = 2;
    pub const NXDOMAIN: u16 = 3;
    pub const NOTIMP: u16 = 4;
    pub const REFUSED: u16 = 5;
    /// Extended RCODE 16 (RFC 6891): the client's EDNS version is not supported.
    pub const BADVERS: u16 = 16;
}

/// Header flag bits (second and third byte of the header, as one big-endian u16).
pub mod flags {
    pub const QR: u16 = 0x8000;
    pub const AA: u16 = 0x0400;
    pub const TC: u16 = 0x0200;
    pub const RD: u16 = 0x0100;
    pub const RA: u16 = 0x0080;
    pub const CD: u16 = 0x0010;
    pub const OPCODE_SHIFT: u16 = 11;
    pub const OPCODE_MASK: u16 = 0x7800;
}

/// Opcode of a standard query; anything else is answered NOTIMP.
pub const OPCODE_QUERY: u8 = 0;

/// A domain name in wire format (length-prefixed labels ending with the root label), held
/// inline so that decoding a query never allocates. Case is preserved as sent.
#[derive(Clone, PartialEq, Eq)]
pub struct WireName {
    len: u8,
    bytes: [u8; NAME_BYTES_MAX],
}

impl std::fmt::Debug for WireName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WireName({:?})", self.to_dotted())
    }
}

impl Default for WireName {
    fn default() -> Self {
        WireName::root()
    }
}

impl WireName {
    /// The root name: a single zero byte.
    pub fn root() -> WireName {
        WireName {
            len: 1,
            bytes: [0; NAME_BYTES_MAX],
        }
    }

    /// The wire bytes, root label included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Builds a name from labels; fails if a label is empty or too long, or the name too long.
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<WireName, DecodeError> {
        let mut name = WireName {
            len: 0,
            bytes: [0; NAME_BYTES_MAX],
        };
        let mut at = 0usize;
        for label in labels {
            if label.is_empty() || label.len() > LABEL_BYTES_MAX {
                return Err(DecodeError::Malformed("bad label length"));
            }
            if at + 1 + label.len() + 1 > NAME_BYTES_MAX {
                return Err(DecodeError::Malformed("name longer than 255 bytes"));
            }
            name.bytes[at] = label.len() as u8;
            name.bytes[at + 1..at + 1 + label.len()].copy_from_slice(label);
            at += 1 + label.len();
        }
        name.bytes[at] = 0;
        name.len = (at + 1) as u8;
        Ok(name)
    }

    /// Builds a name from a dotted string such as `web.service.consul` (a trailing dot is
    /// optional; the empty string and "." are the root).
    pub fn from_dotted(text: &str) -> Result<WireName, DecodeError> {
        let trimmed = text.strip_suffix('.').unwrap_or(text);
        if trimmed.is_empty() {
            return Ok(WireName::root());
        }
        WireName::from_labels(trimmed.split('.').map(str::as_bytes))
    }

    /// Copies `wire` (already validated: labels ≤ 63, total ≤ 255, ends with root).
    fn from_validated(wire: &[u8]) -> WireName {
        debug_assert!(!wire.is_empty() && wire.len() <= NAME_BYTES_MAX);
        debug_assert_eq!(wire[wire.len() - 1], 0);
        let mut name = WireName {
            len: wire.len() as u8,
            bytes: [0; NAME_BYTES_MAX],
        };
        name.bytes[..wire.len()].copy_from_slice(wire);
        name
    }

    /// The labels, first to last, without the root.
    pub fn labels(&self) -> Labels<'_> {
        Labels {
            wire: self.as_bytes(),
            at: 0,
        }
    }

    pub fn label_count(&self) -> usize {
        self.labels().count()
    }

    /// The name as dotted text without the trailing dot; bytes outside printable ASCII and
    /// dots inside labels are escaped as `\DDD`, as zone files do.
    pub fn to_dotted(&self) -> String {
        let mut out = String::with_capacity(self.len as usize);
        for (i, label) in self.labels().enumerate() {
            if i > 0 {
                out.push('.');
            }
            for &b in label {
                if b == b'.' || b == b'\\' || !(0x21..0x7f).contains(&b) {
                    out.push_str(&format!("\\{b:03}"));
                } else {
                    out.push(b as char);
                }
            }
        }
        out
    }

    /// The same name with ASCII letters lowercased (DNS names compare case-insensitively).
    pub fn to_lowercase(&self) -> WireName {
        let mut lower = self.clone();
        lower.bytes[..lower.len as usize].make_ascii_lowercase();
        lower
    }
}

/// Iterator over the labels of a [`WireName`].
pub struct Labels<'a> {
    wire: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let len = *self.wire.get(self.at)? as usize;
        if len == 0 {
            return None;
        }
        let label = &self.wire[self.at + 1..self.at + 1 + len];
        self.at += 1 + len;
        Some(label)
    }
}

/// The EDNS(0) parameters of a query's OPT record (RFC 6891).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edns {
    /// The requestor's UDP payload size; values below 512 are raised to 512 (RFC 6891).
    pub udp_payload_bytes: u16,
    pub version: u8,
    pub dnssec_ok: bool,
}

/// Which decoder produced a [`Query`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodePath {
    Fast,
    General,
}

/// Everything the server needs from a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    /// Header flags as sent (opcode, RD and CD are echoed).
    pub flags: u16,
    pub name: WireName,
    pub qtype: u16,
    pub qclass: u16,
    pub edns: Option<Edns>,
    pub path: DecodePath,
}

impl Query {
    pub fn opcode(&self) -> u8 {
        ((self.flags & flags::OPCODE_MASK) >> flags::OPCODE_SHIFT) as u8
    }
    pub fn recursion_desired(&self) -> bool {
        self.flags & flags::RD != 0
    }
}

/// Why a message could not be turned into a [`Query`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than a header: nothing to answer to.
    TooShort,
    /// The QR bit is set: a response was sent to us. Never answered (avoids loops).
    NotAQuery,
    /// The header is readable but the rest is not (FORMERR).
    Malformed(&'static str),
    /// A well-formed message this decoder does not handle; the general decoder should try.
    Declined(&'static str),
    /// A well-formed request for something praetor does not implement (an opcode other
    /// than QUERY): NOTIMP.
    NotImplemented(&'static str),
}

/// What a reply to an undecodable message needs: the header fields it echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub id: u16,
    pub flags: u16,
}

impl RequestHeader {
    /// Reads the header fields, if the message is at least a header long.
    pub fn read(message: &[u8]) -> Option<RequestHeader> {
        if message.len() < HEADER_BYTES {
            return None;
        }
        Some(RequestHeader {
            id: u16::from_be_bytes([message[0], message[1]]),
            flags: u16::from_be_bytes([message[2], message[3]]),
        })
    }
    pub fn opcode(&self) -> u8 {
        ((self.flags & flags::OPCODE_MASK) >> flags::OPCODE_SHIFT) as u8
    }
}

/// Decodes a query: the fast path when it applies, hickory-proto otherwise.
pub fn decode(message: &[u8]) -> Result<Query, DecodeError> {
    match fast::decode(message) {
        Err(DecodeError::Declined(_)) => general::decode(message),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip_and_lowercase() {
        let name = WireName::from_dotted("Web.Service.consul.").unwrap();
        assert_eq!(name.as_bytes(), b"\x03Web\x07Service\x06consul\x00");
        assert_eq!(name.to_dotted(), "Web.Service.consul");
        assert_eq!(name.to_lowercase().to_dotted(), "web.service.consul");
        assert_eq!(name.label_count(), 3);
        assert_eq!(WireName::from_dotted(".").unwrap().as_bytes(), b"\x00");
        assert!(WireName::from_dotted("a..b").is_err());
        assert!(WireName::from_dotted(&"a".repeat(64)).is_err());
        let long = vec!["abcdefghi"; 26].join(".");
        assert!(WireName::from_dotted(&long).is_err());
        let escaped = WireName::from_labels([&b"a.b"[..], b"c\x00"]).unwrap();
        assert_eq!(escaped.to_dotted(), "a\\046b.c\\000");
    }
}
