//! The server name (SNI) of a TLS ClientHello, read without terminating TLS: what a mesh
//! gateway needs to route a connection it only splices.
//!
//! The parser is pure: it takes the bytes received so far and says whether they hold a
//! whole ClientHello (and its SNI), need more bytes, or can never be one. It reassembles a
//! hello split over several handshake records (a large key share can push it past one
//! record), and reads at most [`HELLO_BYTES_MAX`] bytes: a peer that sends more before its
//! hello ends is refused, so a gateway's buffer per connection is bounded. Every length is
//! checked against what contains it, so no input makes it read out of bounds or panic.

/// Most bytes of TLS records read while looking for a whole ClientHello. A hello with a
/// post-quantum key share is about 1.5 KiB; 16 KiB is one full record, which no client
/// exceeds in practice.
pub const HELLO_BYTES_MAX: usize = 16 * 1024;

/// TLS record type of handshake messages.
const RECORD_HANDSHAKE: u8 = 22;
/// Handshake message type of a ClientHello.
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// Extension type of `server_name` (RFC 6066).
const EXTENSION_SERVER_NAME: u16 = 0;
/// `NameType` of a DNS host name in `server_name`.
const NAME_TYPE_HOST: u8 = 0;
/// Bytes of a record header: type, version, length.
const RECORD_HEADER_BYTES: usize = 5;
/// Bytes of a handshake header: type, 24-bit length.
const HANDSHAKE_HEADER_BYTES: usize = 4;
/// Longest DNS name (RFC 1035).
const SERVER_NAME_BYTES_MAX: usize = 253;

/// What the bytes received so far are.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// A whole ClientHello; its server name, lower-cased, if it sent one.
    Complete(Option<String>),
    /// A prefix of a ClientHello: read more (at most up to [`HELLO_BYTES_MAX`]).
    Incomplete,
    /// Not a ClientHello, or one too large: close the connection.
    Invalid(&'static str),
}

/// Reads the ClientHello at the start of `received`.
pub fn parse(received: &[u8]) -> Hello {
    // Collect handshake bytes from consecutive records until the hello's length is known
    // and reached.
    let mut handshake: Vec<u8> = Vec::new();
    let mut at = 0;
    loop {
        if let Some(total) = hello_length(&handshake) {
            if total > HELLO_BYTES_MAX {
                return Hello::Invalid("the ClientHello is larger than the gateway reads");
            }
            if handshake.len() >= total {
                return client_hello(&handshake[HANDSHAKE_HEADER_BYTES..total]);
            }
        } else if handshake
            .first()
            .is_some_and(|t| *t != HANDSHAKE_CLIENT_HELLO)
        {
            return Hello::Invalid("the first handshake message is not a ClientHello");
        }
        let Some(header) = received.get(at..at + RECORD_HEADER_BYTES) else {
            return incomplete(received);
        };
        if header[0] != RECORD_HANDSHAKE {
            return Hello::Invalid("not a TLS handshake record");
        }
        if header[1] != 3 {
            return Hello::Invalid("not a TLS record version");
        }
        let length = u16::from_be_bytes([header[3], header[4]]) as usize;
        if length == 0 {
            return Hello::Invalid("an empty handshake record");
        }
        let start = at + RECORD_HEADER_BYTES;
        let Some(fragment) = received.get(start..start + length) else {
            return incomplete(received);
        };
        handshake.extend_from_slice(fragment);
        at = start + length;
    }
}

/// More bytes are needed, unless the bound is already reached.
fn incomplete(received: &[u8]) -> Hello {
    if received.len() >= HELLO_BYTES_MAX {
        Hello::Invalid("no whole ClientHello within the bytes the gateway reads")
    } else {
        Hello::Incomplete
    }
}

/// The whole ClientHello's length (header included) once its header is in.
fn hello_length(handshake: &[u8]) -> Option<usize> {
    let header = handshake.get(..HANDSHAKE_HEADER_BYTES)?;
    if header[0] != HANDSHAKE_CLIENT_HELLO {
        return None;
    }
    let body = u32::from_be_bytes([0, header[1], header[2], header[3]]) as usize;
    Some(HANDSHAKE_HEADER_BYTES + body)
}

/// A cursor over a hello's body that fails instead of reading past the end.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a one-byte length.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }

    /// A vector with a two-byte length.
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
}

/// The server name in a ClientHello's body.
fn client_hello(body: &[u8]) -> Hello {
    const TRUNCATED: Hello = Hello::Invalid("a truncated ClientHello");
    let mut reader = Reader { bytes: body };
    // legacy_version, random
    if reader.take(2 + 32).is_none() {
        return TRUNCATED;
    }
    let Some(session_id) = reader.vec8() else {
        return TRUNCATED;
    };
    if session_id.len() > 32 {
        return Hello::Invalid("a session ID longer than 32 bytes");
    }
    if reader.vec16().is_none() || reader.vec8().is_none() {
        return TRUNCATED;
    }
    if reader.bytes.is_empty() {
        // A hello without extensions (TLS 1.2 allows it) names no server.
        return Hello::Complete(None);
    }
    let Some(extensions) = reader.vec16() else {
        return TRUNCATED;
    };
    let mut extensions = Reader { bytes: extensions };
    while !extensions.bytes.is_empty() {
        let (Some(kind), Some(data)) = (extensions.u16(), extensions.vec16()) else {
            return Hello::Invalid("a truncated extension");
        };
        if kind == EXTENSION_SERVER_NAME {
            return server_name(data);
        }
    }
    Hello::Complete(None)
}

/// The host name of a `server_name` extension.
fn server_name(data: &[u8]) -> Hello {
    let mut reader = Reader { bytes: data };
    let Some(list) = reader.vec16() else {
        return Hello::Invalid("a truncated server_name extension");
    };
    let mut list = Reader { bytes: list };
    while !list.bytes.is_empty() {
        let (Some(kind), Some(name)) = (list.u8(), list.vec16()) else {
            return Hello::Invalid("a truncated server name");
        };
        if kind != NAME_TYPE_HOST {
            continue;
        }
        let valid = !name.is_empty()
            && name.len() <= SERVER_NAME_BYTES_MAX
            && name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !valid {
            return Hello::Invalid("a server name that is not a DNS name");
        }
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        return Hello::Complete(Some(name));
    }
    Hello::Complete(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vec16(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    fn extension(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend(vec16(data));
        out
    }

    fn sni_extension(name: &str) -> Vec<u8> {
        let mut entry = vec![NAME_TYPE_HOST];
        entry.extend(vec16(name.as_bytes()));
        extension(EXTENSION_SERVER_NAME, &vec16(&entry))
    }

    /// A ClientHello's handshake message with `extensions` (none: no extensions block).
    fn hello_message(extensions: Option<&[Vec<u8>]>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(32);
        body.extend([9u8; 32]);
        body.extend(vec16(&[0x13, 0x01, 0x13, 0x02]));
        body.extend([1, 0]);
        if let Some(extensions) = extensions {
            body.extend(vec16(&extensions.concat()));
        }
        let mut message = vec![HANDSHAKE_CLIENT_HELLO];
        message.extend(&(body.len() as u32).to_be_bytes()[1..]);
        message.extend(body);
        message
    }

    /// `message` in records of at most `fragment` bytes each.
    fn records(message: &[u8], fragment: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in message.chunks(fragment) {
            out.extend([RECORD_HANDSHAKE, 3, 1]);
            out.extend(vec16(chunk));
        }
        out
    }

    fn several_extensions(name: &str) -> Vec<Vec<u8>> {
        vec![
            extension(10, &[0, 4, 0, 29, 0, 23]),
            extension(43, &[2, 3, 4]),
            sni_extension(name),
            extension(51, &[0u8; 40]),
        ]
    }

    #[test]
    fn the_server_name_is_found_among_several_extensions() {
        let message = hello_message(Some(&several_extensions(
            "DB.default.dc2.internal.x.consul",
        )));
        assert_eq!(
            parse(&records(&message, 16_384)),
            Hello::Complete(Some("db.default.dc2.internal.x.consul".to_string()))
        );
    }

    #[test]
    fn a_hello_split_over_records_is_reassembled() {
        let message = hello_message(Some(&several_extensions("web.default.dc1.internal.x")));
        for fragment in [1, 7, 100] {
            assert_eq!(
                parse(&records(&message, fragment)),
                Hello::Complete(Some("web.default.dc1.internal.x".to_string())),
                "fragments of {fragment} bytes"
            );
        }
    }

    #[test]
    fn every_truncation_asks_for_more() {
        let bytes = records(
            &hello_message(Some(&several_extensions("a.default.dc1.internal.x"))),
            60,
        );
        for end in 0..bytes.len() {
            assert_eq!(parse(&bytes[..end]), Hello::Incomplete, "{end} bytes");
        }
    }

    #[test]
    fn a_hello_without_a_server_name_has_none() {
        let no_sni = hello_message(Some(&[extension(10, &[0, 2, 0, 29])]));
        assert_eq!(parse(&records(&no_sni, 16_384)), Hello::Complete(None));
        let no_extensions = hello_message(None);
        assert_eq!(
            parse(&records(&no_extensions, 16_384)),
            Hello::Complete(None)
        );
    }

    #[test]
    fn oversize_and_malformed_hellos_are_invalid() {
        let big = hello_message(Some(&[
            sni_extension("a.b"),
            extension(21, &vec![0u8; HELLO_BYTES_MAX]),
        ]));
        assert!(matches!(parse(&records(&big, 16_000)), Hello::Invalid(_)));
        // A hello that never ends within the bound.
        let mut endless = vec![
            RECORD_HANDSHAKE,
            3,
            1,
            0x40,
            0x00,
            HANDSHAKE_CLIENT_HELLO,
            0xff,
            0xff,
            0xff,
        ];
        endless.resize(HELLO_BYTES_MAX + 100, 0);
        assert!(matches!(parse(&endless), Hello::Invalid(_)));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\n\r\n"),
            Hello::Invalid(_)
        ));
        assert!(matches!(
            parse(&[RECORD_HANDSHAKE, 3, 1, 0, 0]),
            Hello::Invalid(_)
        ));
        // A server hello where the client's should be.
        let mut server_hello = hello_message(None);
        server_hello[0] = 2;
        assert!(matches!(
            parse(&records(&server_hello, 100)),
            Hello::Invalid(_)
        ));
        // An extension whose length runs past the block.
        let mut message = hello_message(Some(&[sni_extension("a.b")]));
        let len = message.len();
        message[len - 9] = 0xff;
        assert!(matches!(
            parse(&records(&message, 16_384)),
            Hello::Invalid(_)
        ));
        let bad_name = hello_message(Some(&[sni_extension("a b")]));
        assert!(matches!(
            parse(&records(&bad_name, 16_384)),
            Hello::Invalid(_)
        ));
    }

    #[test]
    fn a_real_rustls_hello_names_its_server() {
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let name =
            rustls::pki_types::ServerName::try_from("db.default.dc2.internal.td.consul").unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut bytes = Vec::new();
        client.write_tls(&mut bytes).unwrap();
        assert_eq!(
            parse(&bytes),
            Hello::Complete(Some("db.default.dc2.internal.td.consul".to_string()))
        );
    }

    use std::sync::Arc;

    /// A small deterministic generator, so a failing case can be replayed from its seed.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Fuzz-style property: random bytes, and valid hellos with random bytes flipped or cut,
    /// never panic, and every answer is consistent with the bound: `Incomplete` only below
    /// it, and a name only a DNS name.
    #[test]
    fn arbitrary_bytes_never_panic_and_stay_bounded() {
        let valid = records(
            &hello_message(Some(&several_extensions("db.default.dc2.internal.x"))),
            90,
        );
        let mut random = XorShift(0x9e37_79b9_7f4a_7c15);
        for case in 0..20_000 {
            let mut bytes = if case % 2 == 0 {
                let len = (random.next() % 600) as usize;
                let mut bytes: Vec<u8> = (0..len).map(|_| random.next() as u8).collect();
                // Often a plausible record header, so the parser goes deeper.
                if case % 4 == 0 && len > 5 {
                    bytes[0] = RECORD_HANDSHAKE;
                    bytes[1] = 3;
                    if len > 6 {
                        bytes[5] = HANDSHAKE_CLIENT_HELLO;
                    }
                }
                bytes
            } else {
                let mut bytes = valid.clone();
                for _ in 0..(random.next() % 4) {
                    let at = (random.next() as usize) % bytes.len();
                    bytes[at] = random.next() as u8;
                }
                let end = (random.next() as usize) % (bytes.len() + 1);
                bytes.truncate(end);
                bytes
            };
            if case % 1000 == 0 {
                bytes.resize(HELLO_BYTES_MAX + 1, 0x16);
            }
            match parse(&bytes) {
                Hello::Incomplete => assert!(bytes.len() < HELLO_BYTES_MAX, "case {case}"),
                Hello::Complete(Some(name)) => {
                    assert!(!name.is_empty() && name.len() <= SERVER_NAME_BYTES_MAX)
                }
                Hello::Complete(None) | Hello::Invalid(_) => {}
            }
        }
    }
}
