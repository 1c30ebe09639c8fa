//! The first record of a TLS connection, read by a listener before rustls sees it.
//!
//! A TLS client opens with a handshake record: content type 22, a legacy version `0x03xx`,
//! and a length of at most [`RECORD_BYTES_MAX`] (RFC 8446 §5.1–5.2). [`classify`] reads
//! those [`RECORD_HEADER_BYTES`] and says whether a handshake follows, whether the peer is
//! a plaintext HTTP client that dialed the HTTPS port (Go's `net/http` answers those with
//! [`PLAIN_HTTP_ANSWER`], so Consul's does), or why it is neither. Anything else about the
//! record is rustls' to judge.
//!
//! Pure: a function of the bytes; it never asks for more than the header.

/// Bytes of a TLS record header: content type, legacy version, payload length.
pub const RECORD_HEADER_BYTES: usize = 5;
/// Largest record payload a peer may send: 2^14 bytes of plaintext plus 2,048 of expansion
/// (TLSCiphertext, RFC 8446 §5.2; TLS 1.2 allows the same).
pub const RECORD_BYTES_MAX: usize = 16_384 + 2_048;
/// The handshake content type.
const CONTENT_TYPE_HANDSHAKE: u8 = 22;

/// What Go's HTTPS server answers a plaintext HTTP request with (`net/http`), byte for byte.
pub const PLAIN_HTTP_ANSWER: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// The first five bytes of the requests Go recognises as plaintext HTTP
/// (`tlsRecordHeaderLooksLikeHTTP`).
const PLAIN_HTTP_STARTS: [&[u8; RECORD_HEADER_BYTES]; 5] =
    [b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"];

/// What the first bytes of a connection are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Fewer than [`RECORD_HEADER_BYTES`] so far: read more.
    Incomplete,
    /// A handshake record of `length` payload bytes: hand the connection to TLS.
    Handshake { length: usize },
    /// The start of a plaintext HTTP request.
    PlainHttp,
    /// Neither.
    NotTls(NotTls),
}

/// Why the first record is not a TLS handshake; `Display` is the log line's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotTls {
    /// A plaintext HTTP request (see [`Entry::PlainHttp`]).
    PlainHttp,
    /// The content type is not a handshake's.
    ContentType(u8),
    /// The version is not TLS's `0x03xx`.
    Version(u16),
    /// The length is zero or over [`RECORD_BYTES_MAX`].
    Length(usize),
}

impl std::fmt::Display for NotTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotTls::PlainHttp => write!(f, "not TLS: the peer sent a plaintext HTTP request"),
            NotTls::ContentType(byte) => write!(
                f,
                "not TLS: the first record has content type {byte:#04x}, not a handshake (0x16)"
            ),
            NotTls::Version(version) => write!(
                f,
                "not TLS: the first record has version {version:#06x}, not 0x03xx"
            ),
            NotTls::Length(length) => write!(
                f,
                "not TLS: the first record claims {length} bytes (1 to {RECORD_BYTES_MAX} allowed)"
            ),
        }
    }
}

/// Classifies the first bytes a listener read (any number of them).
pub fn classify(prefix: &[u8]) -> Entry {
    let Some(header) = prefix.first_chunk::<RECORD_HEADER_BYTES>() else {
        return Entry::Incomplete;
    };
    if PLAIN_HTTP_STARTS.contains(&header) {
        return Entry::PlainHttp;
    }
    let [content_type, major, minor, high, low] = *header;
    if content_type != CONTENT_TYPE_HANDSHAKE {
        return Entry::NotTls(NotTls::ContentType(content_type));
    }
    if major != 3 {
        return Entry::NotTls(NotTls::Version(u16::from_be_bytes([major, minor])));
    }
    let length = usize::from(u16::from_be_bytes([high, low]));
    if length == 0 || length > RECORD_BYTES_MAX {
        return Entry::NotTls(NotTls::Length(length));
    }
    // Negative space: what passes starts like no plaintext request Go recognises.
    debug_assert!(!PLAIN_HTTP_STARTS
        .iter()
        .any(|start| start[0] == content_type));
    Entry::Handshake { length }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_hello_passes_and_plain_http_is_recognised() {
        // The header of rustls' ClientHello: handshake, TLS 1.0 legacy version, 0xd5 bytes.
        assert_eq!(
            classify(&[22, 3, 1, 0, 0xd5, 1, 0, 0]),
            Entry::Handshake { length: 0xd5 }
        );
        for request in [
            "GET /v1/kv/x HTTP/1.1\r\n",
            "HEAD / HTTP/1.1\r\n",
            "POST /v1/txn HTTP/1.1\r\n",
            "PUT /v1/kv/x HTTP/1.1\r\n",
            "OPTIONS * HTTP/1.1\r\n",
        ] {
            assert_eq!(classify(request.as_bytes()), Entry::PlainHttp, "{request}");
        }
        // Go does not answer these, and neither do we: they are just not TLS.
        assert_eq!(
            classify(b"DELETE /v1/kv/x HTTP/1.1\r\n"),
            Entry::NotTls(NotTls::ContentType(b'D'))
        );
        assert_eq!(
            classify(b"GET  /"),
            Entry::NotTls(NotTls::ContentType(b'G'))
        );
    }

    #[test]
    fn short_prefixes_wait_and_bad_headers_say_why() {
        for n in 0..RECORD_HEADER_BYTES {
            assert_eq!(classify(&b"GET /"[..n]), Entry::Incomplete);
            assert_eq!(classify(&[22, 3, 3, 0, 1][..n]), Entry::Incomplete);
        }
        assert_eq!(
            classify(&[22, 2, 0, 0, 1]),
            Entry::NotTls(NotTls::Version(0x0200))
        );
        assert_eq!(
            classify(&[22, 3, 3, 0, 0]),
            Entry::NotTls(NotTls::Length(0))
        );
        assert_eq!(
            classify(&[22, 3, 3, 0xff, 0xff]),
            Entry::NotTls(NotTls::Length(65_535))
        );
        assert_eq!(
            classify(&[22, 3, 3, 0x48, 0x00]),
            Entry::Handshake {
                length: RECORD_BYTES_MAX
            }
        );
        assert_eq!(
            NotTls::ContentType(0x47).to_string(),
            "not TLS: the first record has content type 0x47, not a handshake (0x16)"
        );
        assert_eq!(
            std::str::from_utf8(PLAIN_HTTP_ANSWER).unwrap(),
            "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
        );
    }
}
