//! `http` checks: one HTTP/1.1 request per interval; 2xx is passing, 429 warning, anything
//! else (or no answer within the timeout) critical. The response body, capped at the
//! check's output limit, becomes the output, as Consul reports it:
//! `HTTP GET http://host/health: 200 OK Output: <body>`.
//!
//! Redirects are followed (up to [`REDIRECTS_MAX`]) unless `disable_redirects` is set.
//! `https` URLs are refused with a clear output: this build has no TLS client.

use super::{cap_output, connect, describe_io_error, resolve, ProbeResult};
use crate::proto::http::ChunkedDecoder;
use crate::store::catalog::{CheckDefinition, Status};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use std::time::{Duration, Instant};

/// Redirects followed before giving up, as Go's client does.
pub const REDIRECTS_MAX: usize = 10;
/// Largest response head read.
const RESPONSE_HEAD_BYTES_MAX: usize = 64 * 1024;

/// A parsed `http://host:port/path?query` URL.
#[derive(Debug, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    /// `host:port` to connect to.
    pub authority: String,
    /// The `Host` header value.
    pub host_header: String,
    pub target: String,
}

pub fn parse_url(url: &str) -> Result<Url, String> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else {
        return Err(format!("unsupported protocol scheme in {url:?}"));
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host_port = &rest[..end];
    if host_port.is_empty() {
        return Err(format!("no host in request URL {url:?}"));
    }
    let mut target = rest[end..].to_string();
    if target.is_empty() || target.starts_with('?') {
        target.insert(0, '/');
    }
    let has_port = if host_port.starts_with('[') {
        host_port.contains("]:")
    } else {
        host_port.contains(':')
    };
    let authority = if has_port {
        host_port.to_string()
    } else {
        format!("{host_port}:{}", if https { 443 } else { 80 })
    };
    Ok(Url {
        https,
        authority,
        host_header: host_port.to_string(),
        target,
    })
}

/// Go's `Method "url": error` wording.
fn failure(method: &str, url: &str, error: impl std::fmt::Display) -> ProbeResult {
    let verb = {
        let mut chars = method.chars();
        match chars.next() {
            Some(first) => {
                first.to_uppercase().collect::<String>() + &chars.as_str().to_lowercase()
            }
            None => "Get".to_string(),
        }
    };
    (Status::Critical, format!("{verb} {url:?}: {error}"))
}

/// Runs one HTTP check.
pub async fn probe(def: &CheckDefinition, timeout: Duration, output_max: usize) -> ProbeResult {
    let method = if def.method.is_empty() {
        "GET".to_string()
    } else {
        def.method.to_uppercase()
    };
    let deadline = Instant::now() + timeout;
    let mut url = def.http.clone();
    for _ in 0..=REDIRECTS_MAX {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return failure(
                &method,
                &url,
                "context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            );
        }
        match monoio::time::timeout(
            remaining,
            exchange(&method, &url, def, remaining, output_max),
        )
        .await
        {
            Err(_) => {
                return failure(
                    &method,
                    &url,
                    "context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                )
            }
            Ok(Err(e)) => return failure(&method, &url, e),
            Ok(Ok(response)) => {
                if (300..400).contains(&response.code) && !def.disable_redirects {
                    if let Some(location) = &response.location {
                        url = resolve_location(&url, location);
                        continue;
                    }
                }
                let status = match response.code {
                    200..=299 => Status::Passing,
                    429 => Status::Warning,
                    _ => Status::Critical,
                };
                let output = format!(
                    "HTTP {method} {url}: {} {} Output: {}",
                    response.code,
                    response.reason,
                    String::from_utf8_lossy(&response.body)
                );
                return (status, cap_output(output, output_max));
            }
        }
    }
    failure(
        &method,
        &url,
        format!("stopped after {REDIRECTS_MAX} redirects"),
    )
}

fn resolve_location(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_string();
    }
    match parse_url(base) {
        Ok(url) if location.starts_with('/') => format!(
            "{}://{}{}",
            if url.https { "https" } else { "http" },
            url.host_header,
            location
        ),
        _ => location.to_string(),
    }
}

struct Response {
    code: u16,
    reason: String,
    location: Option<String>,
    body: Vec<u8>,
}

/// Sends one request for the check and reads the response: its head, and as much body as
/// the output keeps.
async fn exchange(
    method: &str,
    url: &str,
    def: &CheckDefinition,
    timeout: Duration,
    output_max: usize,
) -> Result<Response, String> {
    let parsed = parse_url(url)?;
    if parsed.https {
        return Err("https checks are not supported by this agent (no TLS client)".to_string());
    }
    let addr = resolve(&parsed.authority, timeout).await?;
    let mut stream = connect(addr, timeout).await?;
    let bytes = request_bytes(method, &parsed, def)?;
    let (written, _) = stream.write_all(bytes).await;
    written.map_err(|e| format!("write tcp {addr}: {}", describe_io_error(&e)))?;

    // Read until the head, then as much body as the output needs.
    let mut buffer: Vec<u8> = Vec::with_capacity(4096);
    loop {
        if let Some(head) = parse_response_head(&buffer)? {
            let raw_body = buffer[head.length_bytes..].to_vec();
            let body = read_body(&mut stream, &head, method, raw_body, output_max).await;
            return Ok(Response {
                code: head.code,
                reason: head.reason,
                location: head.location,
                body,
            });
        }
        let (result, chunk) = stream.read(Vec::with_capacity(8192)).await;
        match result {
            Ok(0) => return Err("EOF".to_string()),
            Ok(_) => buffer.extend_from_slice(&chunk),
            Err(e) => return Err(format!("read tcp {addr}: {}", describe_io_error(&e))),
        }
    }
}

/// The request: the check's headers, with Consul's `Host`, `User-Agent` and `Accept` unless
/// it sets them, and its body; the agent sets `Content-Length` and `Connection` itself.
fn request_bytes(method: &str, parsed: &Url, def: &CheckDefinition) -> Result<Vec<u8>, String> {
    let mut request = format!("{method} {} HTTP/1.1\r\n", parsed.target);
    let has = |name: &str| def.header.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if !has("host") {
        request.push_str(&format!("Host: {}\r\n", parsed.host_header));
    }
    if !has("user-agent") {
        request.push_str("User-Agent: Consul Health Check\r\n");
    }
    if !has("accept") {
        request.push_str("Accept: text/plain, text/*, */*\r\n");
    }
    for (name, values) in &def.header {
        if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("connection") {
            continue;
        }
        for value in values {
            if name.contains(['\r', '\n']) || value.contains(['\r', '\n']) {
                return Err(format!("invalid header {name:?}"));
            }
            request.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        def.body.len()
    ));
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(def.body.as_bytes());
    Ok(bytes)
}

/// What the check needs of a response head.
struct ResponseHead {
    code: u16,
    reason: String,
    location: Option<String>,
    chunked: bool,
    content_length: Option<usize>,
    /// The head's own length in the buffer: the body starts there.
    length_bytes: usize,
}

/// The response head, once `buffer` holds all of it; `None` while it is partial.
fn parse_response_head(buffer: &[u8]) -> Result<Option<ResponseHead>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(buffer) {
        Ok(httparse::Status::Complete(length_bytes)) => {
            let header = |name: &str| {
                response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
            };
            Ok(Some(ResponseHead {
                code: response.code.unwrap_or(0),
                reason: response.reason.unwrap_or("").to_string(),
                location: header("location"),
                chunked: header("transfer-encoding")
                    .is_some_and(|v| v.eq_ignore_ascii_case("chunked")),
                content_length: header("content-length").and_then(|v| v.parse().ok()),
                length_bytes,
            }))
        }
        Ok(httparse::Status::Partial) => {
            if buffer.len() > RESPONSE_HEAD_BYTES_MAX {
                return Err("response head too large".to_string());
            }
            Ok(None)
        }
        Err(e) => Err(format!("malformed HTTP response: {e}")),
    }
}

/// The body, up to `output_max` bytes: none for a response that has none, chunked or up to
/// its length (or the connection's close) otherwise.
async fn read_body(
    stream: &mut monoio::net::TcpStream,
    head: &ResponseHead,
    method: &str,
    mut raw_body: Vec<u8>,
    output_max: usize,
) -> Vec<u8> {
    let code = head.code;
    let no_body = method == "HEAD" || code == 204 || code == 304 || (100..200).contains(&code);
    let wanted = if no_body {
        0
    } else {
        head.content_length.unwrap_or(usize::MAX).min(output_max)
    };
    if head.chunked && !no_body {
        return read_chunked(stream, raw_body, output_max).await;
    }
    while raw_body.len() < wanted {
        let (result, chunk) = stream.read(Vec::with_capacity(8192)).await;
        match result {
            Ok(0) | Err(_) => break,
            Ok(_) => raw_body.extend_from_slice(&chunk),
        }
    }
    raw_body.truncate(wanted);
    raw_body
}

async fn read_chunked(
    stream: &mut monoio::net::TcpStream,
    mut raw: Vec<u8>,
    output_max: usize,
) -> Vec<u8> {
    let mut decoder = ChunkedDecoder::default();
    let mut body = Vec::new();
    while let Ok(used) = decoder.decode(&raw, &mut body, usize::MAX) {
        raw.drain(..used);
        if decoder.is_done() || body.len() >= output_max {
            break;
        }
        let (result, chunk) = stream.read(Vec::with_capacity(8192)).await;
        match result {
            Ok(0) | Err(_) => break,
            Ok(_) => raw.extend_from_slice(&chunk),
        }
    }
    body.truncate(output_max);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_default_ports() {
        let url = parse_url("http://localhost/health?x=1").unwrap();
        assert_eq!(
            (url.authority.as_str(), url.target.as_str()),
            ("localhost:80", "/health?x=1")
        );
        let url = parse_url("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            (url.authority.as_str(), url.target.as_str()),
            ("127.0.0.1:8080", "/")
        );
        let url = parse_url("https://[::1]/x").unwrap();
        assert_eq!(url.authority, "[::1]:443");
        assert!(parse_url("ftp://x").is_err());
        assert!(parse_url("http://").is_err());
        assert_eq!(resolve_location("http://a:1/x", "/y"), "http://a:1/y");
    }
}
