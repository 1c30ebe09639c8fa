//! HTTP/1.1 request parsing and response writing, built around `httparse`.
//!
//! The parser works on a connection's receive buffer and never copies the request head:
//! [`parse_head`] returns byte ranges into that buffer, so the head stays valid across the
//! awaits that read the body. Bodies are framed by `Content-Length` or decoded from
//! `Transfer-Encoding: chunked` by [`ChunkedDecoder`], which is incremental and enforces the
//! caller's byte limit on the decoded size before any byte is buffered past it.
//!
//! Invariants: every size is bounded by [`HttpLimits`]; malformed input yields an
//! [`HttpError`] carrying the status and a one-line message, never a panic; a request is only
//! complete when its whole body is present.

use std::ops::Range;

/// Explicit limits applied to every request. Units are in the names.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Request line plus headers, including the blank line.
    pub head_bytes_max: usize,
    /// Number of header fields.
    pub headers_count_max: usize,
    /// Decoded body size for endpoints without a tighter limit of their own.
    pub body_bytes_max: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            head_bytes_max: 64 * 1024,
            headers_count_max: HEADERS_COUNT_MAX,
            body_bytes_max: 64 << 20,
        }
    }
}

/// The most header fields a request may carry; also the size of the stack array handed to
/// httparse.
pub const HEADERS_COUNT_MAX: usize = 64;

/// A protocol-level error: the response status and a message for its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    pub message: String,
}

impl HttpError {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        HttpError {
            status,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.message)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Put,
    Post,
    Delete,
    Options,
    Patch,
    Other,
}

impl Method {
    fn from_bytes(m: &str) -> Method {
        match m {
            "GET" => Method::Get,
            "PUT" => Method::Put,
            "POST" => Method::Post,
            "DELETE" => Method::Delete,
            "HEAD" => Method::Head,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Other => "OTHER",
        }
    }
}

/// How the body of a request is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A header as two ranges into the receive buffer.
#[derive(Clone, Debug)]
pub struct HeaderRange {
    pub name: Range<u32>,
    pub value: Range<u32>,
}

/// A parsed request line and headers, as ranges into the buffer it was parsed from.
#[derive(Clone, Debug)]
pub struct RequestHead {
    pub method: Method,
    /// The raw method text, kept for error messages about unknown methods.
    pub method_range: Range<u32>,
    /// Path part of the request target, still percent-encoded.
    pub path: Range<u32>,
    /// Query part of the target without the `?`; empty when absent.
    pub query: Range<u32>,
    pub version_minor: u8,
    pub framing: BodyFraming,
    pub expect_continue: bool,
    /// Whether the connection stays open after the response (HTTP/1.1 default, or
    /// HTTP/1.0 with `Connection: keep-alive`).
    pub keep_alive: bool,
    pub headers: Vec<HeaderRange>,
    /// Length of the head in bytes, including the final CRLFCRLF.
    pub head_len: usize,
}

impl RequestHead {
    pub fn header<'b>(&self, buf: &'b [u8], name: &str) -> Option<&'b str> {
        self.headers.iter().find_map(|h| {
            let n = &buf[h.name.start as usize..h.name.end as usize];
            if n.eq_ignore_ascii_case(name.as_bytes()) {
                std::str::from_utf8(&buf[h.value.start as usize..h.value.end as usize]).ok()
            } else {
                None
            }
        })
    }
}

fn range_of(base: &[u8], part: &[u8]) -> Range<u32> {
    let start = part.as_ptr() as usize - base.as_ptr() as usize;
    debug_assert!(start + part.len() <= base.len());
    start as u32..(start + part.len()) as u32
}

/// Parses a request head at the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, and an error when the head is malformed or
/// already longer than the limit allows.
pub fn parse_head(buf: &[u8], limits: &HttpLimits) -> Result<Option<RequestHead>, HttpError> {
    let mut storage = [httparse::EMPTY_HEADER; HEADERS_COUNT_MAX];
    let count_max = limits.headers_count_max.min(HEADERS_COUNT_MAX);
    let mut request = httparse::Request::new(&mut storage[..count_max]);
    let status = match request.parse(buf) {
        Ok(status) => status,
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HttpError::new(
                431,
                format!("too many header fields (limit {count_max})"),
            ))
        }
        Err(e) => {
            return Err(HttpError::bad_request(format!(
                "malformed HTTP request: {e}"
            )))
        }
    };
    let head_len = match status {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => {
            if buf.len() > limits.head_bytes_max {
                return Err(HttpError::new(
                    431,
                    format!("request head exceeds {} bytes", limits.head_bytes_max),
                ));
            }
            return Ok(None);
        }
    };
    if head_len > limits.head_bytes_max {
        return Err(HttpError::new(
            431,
            format!("request head exceeds {} bytes", limits.head_bytes_max),
        ));
    }
    let method_text = request.method.unwrap_or("");
    let target = request.path.unwrap_or("");
    if !target.starts_with('/') {
        return Err(HttpError::bad_request(
            "request target must be an absolute path",
        ));
    }
    let version_minor = request.version.unwrap_or(1);
    let (path_part, query_part) = match target.find('?') {
        Some(q) => (&target[..q], &target[q + 1..]),
        None => (target, &target[target.len()..]),
    };

    let mut framing = BodyFraming::None;
    let mut saw_length = false;
    let mut expect_continue = false;
    let mut keep_alive = version_minor >= 1;
    let mut headers = Vec::with_capacity(request.headers.len());
    for h in request.headers.iter() {
        let name = h.name;
        let value = h.value;
        if name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(value)
                .map_err(|_| HttpError::bad_request("invalid Content-Length"))?;
            let n: u64 = text
                .trim()
                .parse()
                .map_err(|_| HttpError::bad_request("invalid Content-Length"))?;
            if saw_length && framing != BodyFraming::Length(n) {
                return Err(HttpError::bad_request("conflicting Content-Length headers"));
            }
            saw_length = true;
            if framing != BodyFraming::Chunked {
                framing = BodyFraming::Length(n);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            let text = std::str::from_utf8(value).unwrap_or("");
            let last = text.rsplit(',').next().unwrap_or("").trim();
            if last.eq_ignore_ascii_case("chunked") {
                framing = BodyFraming::Chunked;
            } else if !text.trim().eq_ignore_ascii_case("identity") {
                return Err(HttpError::new(
                    501,
                    format!("unsupported transfer encoding {text:?}"),
                ));
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if value.eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                return Err(HttpError::new(417, "unsupported Expect header"));
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
        headers.push(HeaderRange {
            name: range_of(buf, name.as_bytes()),
            value: range_of(buf, value),
        });
    }
    // A request with both framings is a request-smuggling vector; RFC 9112 says chunked wins
    // but the connection must not be reused.
    if saw_length && framing == BodyFraming::Chunked {
        keep_alive = false;
    }
    Ok(Some(RequestHead {
        method: Method::from_bytes(method_text),
        method_range: range_of(buf, method_text.as_bytes()),
        path: range_of(buf, path_part.as_bytes()),
        query: range_of(buf, query_part.as_bytes()),
        version_minor,
        framing,
        expect_continue,
        keep_alive,
        headers,
        head_len,
    }))
}

/// Incremental decoder for `Transfer-Encoding: chunked` bodies.
///
/// Feed it the bytes after the head as they arrive; it appends decoded data to `out` and
/// reports how many input bytes it consumed. Trailers are read and discarded.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    chunk_remaining: u64,
    decoded_bytes: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data,
    DataEnd,
    Trailer,
    Done,
}

/// Longest chunk-size line (size, extensions, CRLF) we accept.
const CHUNK_LINE_BYTES_MAX: usize = 1024;

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes as much of `input` as possible. Returns the number of bytes consumed.
    pub fn decode(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        body_bytes_max: usize,
    ) -> Result<usize, HttpError> {
        let mut pos = 0;
        loop {
            match self.state {
                ChunkState::Done => return Ok(pos),
                ChunkState::Size | ChunkState::Trailer => {
                    let rest = &input[pos..];
                    let Some(eol) = find_crlf(rest) else {
                        if rest.len() > CHUNK_LINE_BYTES_MAX {
                            return Err(HttpError::bad_request("chunk header line too long"));
                        }
                        return Ok(pos);
                    };
                    let line = &rest[..eol];
                    pos += eol + 2;
                    if self.state == ChunkState::Trailer {
                        if line.is_empty() {
                            self.state = ChunkState::Done;
                        }
                        continue;
                    }
                    let size_text = line
                        .split(|b| *b == b';')
                        .next()
                        .unwrap_or(b"")
                        .trim_ascii();
                    if size_text.is_empty() || size_text.len() > 16 {
                        return Err(HttpError::bad_request("invalid chunk size"));
                    }
                    let mut size: u64 = 0;
                    for &b in size_text {
                        let digit = (b as char)
                            .to_digit(16)
                            .ok_or_else(|| HttpError::bad_request("invalid chunk size"))?;
                        size = (size << 4) | digit as u64;
                    }
                    if self.decoded_bytes + size > body_bytes_max as u64 {
                        return Err(HttpError::new(
                            413,
                            format!("request body exceeds {body_bytes_max} bytes"),
                        ));
                    }
                    if size == 0 {
                        self.state = ChunkState::Trailer;
                    } else {
                        self.chunk_remaining = size;
                        self.state = ChunkState::Data;
                    }
                }
                ChunkState::Data => {
                    let available = (input.len() - pos) as u64;
                    if available == 0 {
                        return Ok(pos);
                    }
                    let take = available.min(self.chunk_remaining) as usize;
                    out.extend_from_slice(&input[pos..pos + take]);
                    pos += take;
                    self.chunk_remaining -= take as u64;
                    self.decoded_bytes += take as u64;
                    if self.chunk_remaining == 0 {
                        self.state = ChunkState::DataEnd;
                    }
                }
                ChunkState::DataEnd => {
                    if input.len() - pos < 2 {
                        return Ok(pos);
                    }
                    if &input[pos..pos + 2] != b"\r\n" {
                        return Err(HttpError::bad_request("chunk data not followed by CRLF"));
                    }
                    pos += 2;
                    self.state = ChunkState::Size;
                }
            }
        }
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// Decodes `%XX` escapes. With `plus_is_space`, `+` becomes a space (query strings, as Go's
/// `url.ParseQuery` does). Returns `None` for an invalid escape or invalid UTF-8.
pub fn percent_decode(input: &str, plus_is_space: bool) -> Option<std::borrow::Cow<'_, str>> {
    let bytes = input.as_bytes();
    if !bytes
        .iter()
        .any(|&b| b == b'%' || (plus_is_space && b == b'+'))
    {
        return Some(std::borrow::Cow::Borrowed(input));
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = (*bytes.get(i + 1)? as char).to_digit(16)?;
                let lo = (*bytes.get(i + 2)? as char).to_digit(16)?;
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok().map(std::borrow::Cow::Owned)
}

/// Iterates over `name=value` pairs of a raw query string, decoded. Pairs that fail to
/// decode are reported as errors by [`QueryParams::parse`].
#[derive(Debug, Default, Clone)]
pub struct QueryParams<'a> {
    pairs: Vec<(std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>)>,
}

/// Most query parameters a request may carry.
pub const QUERY_PARAMS_COUNT_MAX: usize = 128;

impl<'a> QueryParams<'a> {
    pub fn parse(raw: &'a str) -> Result<QueryParams<'a>, HttpError> {
        let mut pairs = Vec::new();
        if raw.is_empty() {
            return Ok(QueryParams { pairs });
        }
        for part in raw.split('&') {
            if part.is_empty() {
                continue;
            }
            if pairs.len() == QUERY_PARAMS_COUNT_MAX {
                return Err(HttpError::bad_request(format!(
                    "too many query parameters (limit {QUERY_PARAMS_COUNT_MAX})"
                )));
            }
            let (name, value) = match part.find('=') {
                Some(eq) => (&part[..eq], &part[eq + 1..]),
                None => (part, ""),
            };
            let name = percent_decode(name, true)
                .ok_or_else(|| HttpError::bad_request("invalid query string escape"))?;
            let value = percent_decode(value, true)
                .ok_or_else(|| HttpError::bad_request("invalid query string escape"))?;
            pairs.push((name, value));
        }
        Ok(QueryParams { pairs })
    }

    /// Whether the parameter is present at all (Consul treats `?recurse` and `?recurse=` alike).
    pub fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(n, _)| n == name)
    }

    /// The first value of the parameter.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_ref())
    }

    /// Every value of a repeatable parameter, in order.
    pub fn get_all<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.pairs
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_ref())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_ref(), v.as_ref()))
    }
}

/// The reason phrase of a status, as Go's `net/http` writes it (Consul's status lines come
/// from there, and handlers pass through any status, e.g. 415 from a proxied answer); empty
/// for a code Go has no text for, whose line [`write_response_head`] words as Go does.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        208 => "Already Reported",
        226 => "IM Used",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Request Entity Too Large",
        414 => "Request URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Requested Range Not Satisfiable",
        417 => "Expectation Failed",
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Entity",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        510 => "Not Extended",
        511 => "Network Authentication Required",
        _ => "",
    }
}

/// Bytes of a status line plus our fixed headers, for sizing output buffers.
const RESPONSE_HEAD_BYTES_TYPICAL: usize = 96;

/// Appends a response to `out`: status line, the given headers, `Content-Length`, and body.
///
/// `extra_headers` is pre-formatted header text (each line ending in CRLF); callers build it
/// once per response without intermediate allocations.
pub fn write_response(
    out: &mut Vec<u8>,
    status: u16,
    content_type: Option<&str>,
    extra_headers: &[u8],
    body: &[u8],
    keep_alive: bool,
) {
    // One allocation sized for the whole answer instead of growing step by step.
    out.reserve(RESPONSE_HEAD_BYTES_TYPICAL + extra_headers.len() + body.len());
    write_response_head(
        out,
        status,
        content_type,
        extra_headers,
        body.len(),
        keep_alive,
    );
    out.extend_from_slice(body);
}

/// Appends only the head of a response whose body of `body_len` bytes the caller appends.
pub fn write_response_head(
    out: &mut Vec<u8>,
    status: u16,
    content_type: Option<&str>,
    extra_headers: &[u8],
    body_len: usize,
    keep_alive: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_u64(out, status as u64);
    out.push(b' ');
    match reason_phrase(status) {
        "" => {
            out.extend_from_slice(b"status code ");
            push_u64(out, status as u64);
        }
        phrase => out.extend_from_slice(phrase.as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
    if let Some(ct) = content_type {
        out.extend_from_slice(b"Content-Type: ");
        out.extend_from_slice(ct.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(extra_headers);
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"Content-Length: ");
    push_u64(out, body_len as u64);
    out.extend_from_slice(b"\r\n\r\n");
}

/// Cuts the body off the one response that starts at `start` in `out`, keeping its head (the
/// answer to a HEAD request: same status and headers, no body). The response must be whole.
pub fn truncate_to_head(out: &mut Vec<u8>, start: usize) {
    assert!(start <= out.len(), "the response starts inside the buffer");
    if start == out.len() {
        return;
    }
    let head_end = out[start..]
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|at| start + at + 4);
    debug_assert!(head_end.is_some(), "a written response has a complete head");
    if let Some(head_end) = head_end {
        out.truncate(head_end);
    }
}

/// Appends the decimal form of `n` without allocating.
pub fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut buffer = itoa::Buffer::new();
    out.extend_from_slice(buffer.format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_to_head_keeps_earlier_answers_and_the_head_only() {
        let mut out = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
        let start = out.len();
        write_response(&mut out, 405, Some("text/plain"), b"", b"not allowed", true);
        truncate_to_head(&mut out, start);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"));
        assert!(text.ends_with("Content-Length: 11\r\n\r\n"), "{text}");
        assert!(!text.contains("not allowed"));
    }

    fn head(text: &str) -> Result<Option<RequestHead>, HttpError> {
        parse_head(text.as_bytes(), &HttpLimits::default())
    }

    #[test]
    fn parses_simple_get_with_query() {
        let text = "GET /v1/kv/foo?recurse&index=5 HTTP/1.1\r\nHost: x\r\n\r\n";
        let h = head(text).unwrap().unwrap();
        assert_eq!(h.method, Method::Get);
        assert_eq!(
            &text[h.path.start as usize..h.path.end as usize],
            "/v1/kv/foo"
        );
        assert_eq!(
            &text[h.query.start as usize..h.query.end as usize],
            "recurse&index=5"
        );
        assert_eq!(h.framing, BodyFraming::None);
        assert!(h.keep_alive);
        assert_eq!(h.head_len, text.len());
        assert_eq!(h.header(text.as_bytes(), "HOST"), Some("x"));
    }

    #[test]
    fn partial_head_needs_more() {
        assert!(head("GET /v1/kv/foo HTTP/1.1\r\nHost").unwrap().is_none());
    }

    #[test]
    fn oversized_head_is_431() {
        let limits = HttpLimits {
            head_bytes_max: 32,
            ..HttpLimits::default()
        };
        let err = parse_head(
            b"GET /v1/kv/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n",
            &limits,
        )
        .unwrap_err();
        assert_eq!(err.status, 431);
    }

    #[test]
    fn garbage_is_400() {
        assert_eq!(head("\x01\x02 nonsense\r\n\r\n").unwrap_err().status, 400);
        assert_eq!(head("GET foo HTTP/1.1\r\n\r\n").unwrap_err().status, 400);
    }

    #[test]
    fn content_length_and_conflicts() {
        let h = head("PUT /v1/kv/a HTTP/1.1\r\nContent-Length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, BodyFraming::Length(3));
        assert_eq!(
            head("PUT /a HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            head("PUT /a HTTP/1.1\r\nContent-Length: -1\r\n\r\n")
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn connection_close_and_http10() {
        assert!(
            !head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap()
                .unwrap()
                .keep_alive
        );
        assert!(!head("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().keep_alive);
        assert!(
            head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .unwrap()
                .unwrap()
                .keep_alive
        );
    }

    #[test]
    fn expect_continue_detected() {
        let h = head("PUT /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.expect_continue);
    }

    #[test]
    fn chunked_decoding_incremental() {
        let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        for split in 0..body.len() {
            let mut d = ChunkedDecoder::default();
            let mut out = Vec::new();
            let mut pending = body[..split].to_vec();
            let used = d.decode(&pending, &mut out, 1024).unwrap();
            pending.drain(..used);
            pending.extend_from_slice(&body[split..]);
            let used = d.decode(&pending, &mut out, 1024).unwrap();
            assert!(d.is_done(), "split {split}");
            assert_eq!(out, b"Wikipedia");
            assert_eq!(&pending[used..], b"NEXT");
        }
    }

    #[test]
    fn chunked_limit_is_413() {
        let mut d = ChunkedDecoder::default();
        let err = d.decode(b"10\r\n", &mut Vec::new(), 8).unwrap_err();
        assert_eq!(err.status, 413);
        let mut d = ChunkedDecoder::default();
        assert_eq!(
            d.decode(b"zz\r\n", &mut Vec::new(), 8).unwrap_err().status,
            400
        );
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb", false).unwrap(), "a/b");
        assert_eq!(percent_decode("a+b", true).unwrap(), "a b");
        assert_eq!(percent_decode("a+b", false).unwrap(), "a+b");
        assert!(percent_decode("a%2", false).is_none());
        assert!(percent_decode("a%zz", false).is_none());
        assert!(percent_decode("%ff", false).is_none());
    }

    #[test]
    fn query_params() {
        let q = QueryParams::parse("recurse&tag=a&tag=b%20c&wait=1s").unwrap();
        assert!(q.has("recurse"));
        assert_eq!(q.get("recurse"), Some(""));
        assert_eq!(q.get_all("tag").collect::<Vec<_>>(), vec!["a", "b c"]);
        assert_eq!(q.get("wait"), Some("1s"));
        assert!(!q.has("missing"));
    }

    #[test]
    fn response_writing() {
        let mut out = Vec::new();
        write_response(
            &mut out,
            200,
            Some("application/json"),
            b"X-Consul-Index: 5\r\n",
            b"true",
            true,
        );
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Consul-Index: 5\r\nContent-Length: 4\r\n\r\ntrue"
        );
    }

    #[test]
    fn every_status_line_carries_go_s_reason_phrase() {
        let line = |status: u16| {
            let mut out = Vec::new();
            write_response(&mut out, status, None, b"", b"", true);
            let text = String::from_utf8(out).unwrap();
            text.lines().next().unwrap().to_string()
        };
        assert_eq!(line(415), "HTTP/1.1 415 Unsupported Media Type");
        assert_eq!(line(401), "HTTP/1.1 401 Unauthorized");
        assert_eq!(line(502), "HTTP/1.1 502 Bad Gateway");
        // A code Go has no text for is worded as Go words it.
        assert_eq!(line(599), "HTTP/1.1 599 status code 599");
        for status in 100..600 {
            assert!(!line(status).contains("Unknown"), "{status}");
        }
    }
}
