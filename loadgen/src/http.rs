//! HTTP/1.1 client wire format: request encoding and an incremental response parser.
//!
//! The parser is pure (bytes in, a verdict out) so it can be tested without sockets. It reads
//! only what a load generator needs — the status code, how the body is framed
//! (`Content-Length`, `chunked`, or until close), `X-Consul-Index` and `Connection: close` —
//! and it never allocates. Every size is bounded: a head larger than [`HEAD_BYTES_MAX`] or a
//! body larger than [`BODY_BYTES_MAX`] is an error, not an unbounded buffer.

/// Largest response head (status line + headers) accepted.
pub const HEAD_BYTES_MAX: usize = 64 * 1024;
/// Largest response body accepted (a health query over 5,000 instances is a few MiB).
pub const BODY_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Longest chunk-size line (hex digits, extensions and CRLF) accepted in a chunked body.
const CHUNK_LINE_BYTES_MAX: usize = 1024;

/// Why a response could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    HeadTooLarge,
    BodyTooLarge,
    Malformed(&'static str),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::HeadTooLarge => write!(f, "response head exceeds {HEAD_BYTES_MAX} bytes"),
            HttpError::BodyTooLarge => write!(f, "response body exceeds {BODY_BYTES_MAX} bytes"),
            HttpError::Malformed(what) => write!(f, "malformed response: {what}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// How the body that follows a response head is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// Exactly this many bytes.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Everything until the server closes the connection.
    UntilClose,
}

/// The parts of a response head a load generator acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// Bytes of the status line and headers, including the blank line.
    pub head_len: usize,
    pub framing: BodyFraming,
    /// `X-Consul-Index`, when present and numeric.
    pub consul_index: Option<u64>,
    /// The server announced it will close the connection after this response.
    pub connection_close: bool,
}

/// Parses a response head from the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed. Responses to requests that never carry a body
/// (1xx, 204, 304) get `Length(0)`.
pub fn parse_response_head(buf: &[u8]) -> Result<Option<ResponseHead>, HttpError> {
    let Some(end) = memchr::memmem::find(buf, b"\r\n\r\n") else {
        if buf.len() > HEAD_BYTES_MAX {
            return Err(HttpError::HeadTooLarge);
        }
        return Ok(None);
    };
    let head_len = end + 4;
    if head_len > HEAD_BYTES_MAX {
        return Err(HttpError::HeadTooLarge);
    }
    let head = &buf[..end];
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next().ok_or(HttpError::Malformed("empty head"))?;
    let status = parse_status_line(status_line)?;

    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    let mut consul_index = None;
    let mut connection_close = false;
    for line in lines {
        let colon =
            memchr::memchr(b':', line).ok_or(HttpError::Malformed("header without colon"))?;
        let name = &line[..colon];
        let value = trim(&line[colon + 1..]);
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_decimal(value).ok_or(HttpError::Malformed("bad Content-Length"))?;
            if n > BODY_BYTES_MAX as u64 {
                return Err(HttpError::BodyTooLarge);
            }
            content_length = Some(n as usize);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = ends_with_token(value, b"chunked");
        } else if name.eq_ignore_ascii_case(b"x-consul-index") {
            consul_index = parse_decimal(value);
        } else if name.eq_ignore_ascii_case(b"connection") {
            connection_close = contains_token(value, b"close");
        }
    }
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        BodyFraming::Length(0)
    } else if chunked {
        // RFC 9112 §6.3: chunked wins over Content-Length.
        BodyFraming::Chunked
    } else if let Some(n) = content_length {
        BodyFraming::Length(n)
    } else {
        BodyFraming::UntilClose
    };
    Ok(Some(ResponseHead {
        status,
        head_len,
        framing,
        consul_index,
        connection_close,
    }))
}

fn parse_status_line(line: &[u8]) -> Result<u16, HttpError> {
    // "HTTP/1.1 200 OK": the version, one space, three digits, then an optional reason.
    if line.len() < 12 || !line.starts_with(b"HTTP/1.") || line[8] != b' ' {
        return Err(HttpError::Malformed("bad status line"));
    }
    let digits = &line[9..12];
    if !digits.iter().all(u8::is_ascii_digit) || line.get(12).is_some_and(|&b| b != b' ') {
        return Err(HttpError::Malformed("bad status code"));
    }
    Ok(digits
        .iter()
        .fold(0u16, |acc, &d| acc * 10 + u16::from(d - b'0')))
}

fn trim(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// A non-empty run of ASCII digits that fits in a u64.
pub fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u64::from(d - b'0'))
    })
}

fn contains_token(list: &[u8], token: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .any(|t| trim(t).eq_ignore_ascii_case(token))
}

fn ends_with_token(list: &[u8], token: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .next_back()
        .is_some_and(|t| trim(t).eq_ignore_ascii_case(token))
}

/// Resumable scanner over a chunked body. It walks chunk headers only, so rescanning after
/// each read costs O(chunks), not O(bytes); when asked it also copies the payload out.
#[derive(Debug, Default, Clone)]
pub struct ChunkedScanner {
    /// Offset (from the start of the body) of the next chunk-size line not yet consumed.
    next_line: usize,
    /// Payload bytes seen so far.
    payload_bytes: usize,
}

impl ChunkedScanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scans `body` (all body bytes received so far, starting right after the head).
    /// Returns `Ok(Some(consumed))` once the terminating chunk and trailers are complete,
    /// with `consumed` the total encoded length; `Ok(None)` when more bytes are needed.
    /// With `out`, each completed chunk's payload is appended to it.
    pub fn scan(
        &mut self,
        body: &[u8],
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<Option<usize>, HttpError> {
        loop {
            let rest = &body[self.next_line..];
            let Some(line_end) = memchr::memmem::find(rest, b"\r\n") else {
                if rest.len() > CHUNK_LINE_BYTES_MAX {
                    return Err(HttpError::Malformed("chunk-size line too long"));
                }
                return Ok(None);
            };
            if line_end > CHUNK_LINE_BYTES_MAX {
                return Err(HttpError::Malformed("chunk-size line too long"));
            }
            let line = &rest[..line_end];
            let size_field = &line[..memchr::memchr(b';', line).unwrap_or(line.len())];
            let size = parse_hex(trim(size_field)).ok_or(HttpError::Malformed("bad chunk size"))?;
            if size == 0 {
                // Last chunk: skip trailer lines up to the empty line.
                let mut at = self.next_line + line_end + 2;
                loop {
                    let Some(end) = memchr::memmem::find(&body[at..], b"\r\n") else {
                        if body.len() - at > HEAD_BYTES_MAX {
                            return Err(HttpError::HeadTooLarge);
                        }
                        return Ok(None);
                    };
                    at += end + 2;
                    if end == 0 {
                        return Ok(Some(at));
                    }
                }
            }
            if self.payload_bytes.saturating_add(size) > BODY_BYTES_MAX {
                return Err(HttpError::BodyTooLarge);
            }
            let data_start = self.next_line + line_end + 2;
            let data_end = data_start + size;
            if body.len() < data_end + 2 {
                return Ok(None);
            }
            if &body[data_end..data_end + 2] != b"\r\n" {
                return Err(HttpError::Malformed("chunk not followed by CRLF"));
            }
            if let Some(out) = out.as_deref_mut() {
                out.extend_from_slice(&body[data_start..data_end]);
            }
            self.payload_bytes += size;
            self.next_line = data_end + 2;
        }
    }
}

fn parse_hex(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    digits.iter().try_fold(0usize, |acc, &d| {
        let v = (d as char).to_digit(16)?;
        Some(acc * 16 + v as usize)
    })
}

/// Appends an HTTP/1.1 request to `out`. `host` is the `Host` header value (`ip:port`).
/// A body, or any PUT/POST, gets a `Content-Length`; `content_type` is sent when given.
pub fn encode_request(
    out: &mut Vec<u8>,
    method: &str,
    path: &str,
    host: &str,
    content_type: Option<&str>,
    body: &[u8],
) {
    encode_request_with_token(out, method, path, host, content_type, body, None);
}

/// [`encode_request`] with an ACL token (`X-Consul-Token`) when one is given.
pub fn encode_request_with_token(
    out: &mut Vec<u8>,
    method: &str,
    path: &str,
    host: &str,
    content_type: Option<&str>,
    body: &[u8],
    token: Option<&str>,
) {
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\nUser-Agent: loadgen\r\n");
    if let Some(token) = token {
        out.extend_from_slice(b"X-Consul-Token: ");
        out.extend_from_slice(token.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(ct) = content_type {
        out.extend_from_slice(b"Content-Type: ");
        out.extend_from_slice(ct.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() || method == "PUT" || method == "POST" {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// Percent-encodes a KV key or path segment for use in a URL path: unreserved characters,
/// `/`, `:` and `@` (legal in a path, and common in check IDs like `service:web-1`) pass
/// through; everything else becomes `%XX`.
pub fn encode_path(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/' | b':' | b'@')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_content_length_response_with_consul_headers() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Consul-Index: 1234\r\n\
                    X-Consul-Knownleader: true\r\nContent-Length: 2\r\n\r\n[]";
        let head = parse_response_head(raw).unwrap().unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(head.framing, BodyFraming::Length(2));
        assert_eq!(head.consul_index, Some(1234));
        assert_eq!(&raw[head.head_len..], b"[]");
        assert!(!head.connection_close);
    }

    #[test]
    fn header_names_are_case_insensitive_and_values_trimmed() {
        let raw = b"HTTP/1.1 404 Not Found\r\ncontent-length:   0 \r\nx-consul-index:\t77\r\n\
                    CONNECTION: keep-alive, Close\r\n\r\n";
        let head = parse_response_head(raw).unwrap().unwrap();
        assert_eq!(head.status, 404);
        assert_eq!(head.framing, BodyFraming::Length(0));
        assert_eq!(head.consul_index, Some(77));
        assert!(head.connection_close);
    }

    #[test]
    fn incomplete_heads_ask_for_more() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        for cut in 0..raw.len() - 5 {
            assert_eq!(parse_response_head(&raw[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(parse_response_head(&raw[..raw.len() - 5])
            .unwrap()
            .is_some());
    }

    #[test]
    fn framing_rules() {
        let chunked =
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(
            parse_response_head(chunked).unwrap().unwrap().framing,
            BodyFraming::Chunked
        );
        let close = b"HTTP/1.0 200 OK\r\n\r\n";
        assert_eq!(
            parse_response_head(close).unwrap().unwrap().framing,
            BodyFraming::UntilClose
        );
        let no_content = b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n";
        assert_eq!(
            parse_response_head(no_content).unwrap().unwrap().framing,
            BodyFraming::Length(0)
        );
        let reasonless = b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            parse_response_head(reasonless).unwrap().unwrap().status,
            200
        );
    }

    #[test]
    fn malformed_heads_are_errors() {
        for raw in [
            &b"HTTP/2 200 OK\r\n\r\n"[..],
            b"HTTP/1.1 2x0 OK\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"garbage\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        ] {
            assert!(
                matches!(parse_response_head(raw), Err(HttpError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn size_limits_are_enforced() {
        let mut huge = b"HTTP/1.1 200 OK\r\nX-Pad: ".to_vec();
        huge.resize(HEAD_BYTES_MAX + 10, b'a');
        assert_eq!(parse_response_head(&huge), Err(HttpError::HeadTooLarge));
        let big_body = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            BODY_BYTES_MAX + 1
        );
        assert_eq!(
            parse_response_head(big_body.as_bytes()),
            Err(HttpError::BodyTooLarge)
        );
    }

    #[test]
    fn chunked_body_in_pieces() {
        let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        let total = body.len() - 4;
        // Feed every prefix: only the full encoding completes, and payload is exact.
        for cut in 0..total {
            let mut scanner = ChunkedScanner::new();
            assert_eq!(scanner.scan(&body[..cut], None), Ok(None), "cut {cut}");
        }
        let mut scanner = ChunkedScanner::new();
        let mut out = Vec::new();
        assert_eq!(scanner.scan(&body[..20], Some(&mut out)), Ok(None));
        assert_eq!(scanner.scan(body, Some(&mut out)), Ok(Some(total)));
        assert_eq!(out, b"Wikipedia in\r\n\r\nchunks.");
    }

    #[test]
    fn chunked_errors() {
        let mut s = ChunkedScanner::new();
        assert!(s.scan(b"zz\r\n", None).is_err());
        let mut s = ChunkedScanner::new();
        assert!(s.scan(b"3\r\nabcXY", None).is_err());
        let mut s = ChunkedScanner::new();
        let long = vec![b'1'; CHUNK_LINE_BYTES_MAX + 2];
        assert!(s.scan(&long, None).is_err());
        let mut s = ChunkedScanner::new();
        assert_eq!(
            s.scan(b"fffffffffffffff\r\n", None),
            Err(HttpError::BodyTooLarge)
        );
    }

    #[test]
    fn request_encoding() {
        let mut out = Vec::new();
        encode_request(&mut out, "GET", "/v1/kv/a", "127.0.0.1:8500", None, b"");
        assert_eq!(
            out,
            b"GET /v1/kv/a HTTP/1.1\r\nHost: 127.0.0.1:8500\r\nUser-Agent: loadgen\r\n\r\n"
        );
        out.clear();
        encode_request(
            &mut out,
            "PUT",
            "/v1/kv/a",
            "h:1",
            Some("application/json"),
            b"xyz",
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("PUT /v1/kv/a HTTP/1.1\r\n"));
        assert!(text.contains("Content-Type: application/json\r\n"));
        assert!(text.ends_with("Content-Length: 3\r\n\r\nxyz"));
        let mut empty_put = Vec::new();
        encode_request(&mut empty_put, "PUT", "/x", "h:1", None, b"");
        assert!(String::from_utf8(empty_put)
            .unwrap()
            .contains("Content-Length: 0\r\n"));
    }

    #[test]
    fn path_encoding() {
        assert_eq!(encode_path("a/b-c_d.e~f"), "a/b-c_d.e~f");
        assert_eq!(encode_path("a b?c"), "a%20b%3Fc");
    }

    #[test]
    fn decimal_parsing() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"18446744073709551"), Some(18446744073709551));
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"1a"), None);
        assert_eq!(parse_decimal(b"99999999999999999999"), None);
    }
}
