//! A small blocking HTTP/1.1 client for the operator commands, speaking to an agent's
//! `/v1` API the way Consul's CLI does (`-http-addr`, `CONSUL_HTTP_ADDR`, `-token`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Largest response body the CLI accepts (snapshots stream separately).
const RESPONSE_BYTES_MAX: usize = 1 << 30;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// `host:port` of the agent's HTTP API.
    pub address: String,
    pub token: Option<String>,
    pub datacenter: Option<String>,
    pub stale: bool,
    /// Read timeout; blocking queries need long ones.
    pub timeout: Duration,
}

impl ClientOptions {
    /// Resolves the agent address: the flag, then `CONSUL_HTTP_ADDR`/`PRAETOR_HTTP_ADDR`, then
    /// 127.0.0.1:8500. A `http://` prefix is accepted.
    pub fn from_flags(
        http_addr: Option<&str>,
        token: Option<&str>,
        datacenter: Option<&str>,
        stale: bool,
    ) -> Self {
        let address = http_addr
            .map(str::to_string)
            .or_else(|| std::env::var("PRAETOR_HTTP_ADDR").ok())
            .or_else(|| std::env::var("CONSUL_HTTP_ADDR").ok())
            .unwrap_or_else(|| "127.0.0.1:8500".to_string());
        let address = address
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let token = token
            .map(str::to_string)
            .or_else(|| std::env::var("CONSUL_HTTP_TOKEN").ok())
            .filter(|t| !t.is_empty());
        ClientOptions {
            address,
            token,
            datacenter: datacenter.map(str::to_string),
            stale,
            timeout: Duration::from_secs(660),
        }
    }
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).trim().to_string()
    }
}

/// Percent-encodes a path segment sequence, keeping `/` so KV keys stay hierarchical.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Percent-encodes a query value.
pub fn encode_query_value(value: &str) -> String {
    encode_path(value).replace('/', "%2F")
}

pub struct Client {
    pub options: ClientOptions,
}

impl Client {
    pub fn new(options: ClientOptions) -> Self {
        Client { options }
    }

    /// Adds `dc` and `stale` to a query string as the command's flags say.
    fn with_common_query(&self, path_and_query: &str) -> String {
        let mut target = path_and_query.to_string();
        let mut add = |param: String| {
            target.push(if target.contains('?') { '&' } else { '?' });
            target.push_str(&param);
        };
        if let Some(dc) = &self.options.datacenter {
            add(format!("dc={}", encode_query_value(dc)));
        }
        if self.options.stale {
            add("stale".to_string());
        }
        target
    }

    pub fn request(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, String> {
        let target = self.with_common_query(path_and_query);
        let addr = self.options.address.clone();
        let socket_addr = std::net::ToSocketAddrs::to_socket_addrs(&addr)
            .map_err(|e| format!("cannot resolve agent address {addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("cannot resolve agent address {addr}"))?;
        let mut stream = TcpStream::connect_timeout(&socket_addr, CONNECT_TIMEOUT)
            .map_err(|e| format!("error connecting to agent at {addr}: {e}"))?;
        stream.set_read_timeout(Some(self.options.timeout)).ok();
        let mut request = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: praetor-cli\r\nConnection: close\r\n");
        if let Some(token) = &self.options.token {
            request.push_str(&format!("X-Consul-Token: {token}\r\n"));
        }
        let body = body.unwrap_or(b"");
        if method != "GET" || !body.is_empty() {
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        stream
            .write_all(&bytes)
            .map_err(|e| format!("error sending request to {addr}: {e}"))?;
        let mut raw = Vec::new();
        stream
            .take(RESPONSE_BYTES_MAX as u64 + 64 * 1024)
            .read_to_end(&mut raw)
            .map_err(|e| format!("error reading response from {addr}: {e}"))?;
        parse_response(&raw)
    }

    /// Like [`Client::request`], but a non-2xx status becomes an error with the body's text.
    pub fn ok(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, String> {
        let response = self.request(method, path_and_query, body)?;
        if !(200..300).contains(&response.status) {
            return Err(format!(
                "Unexpected response code: {} ({})",
                response.status,
                response.body_text()
            ));
        }
        Ok(response)
    }
}

fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_len = match parsed.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return Err("agent closed the connection before a complete response".to_string())
        }
        Err(e) => return Err(format!("malformed response from agent: {e}")),
    };
    let status = parsed.code.unwrap_or(0);
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let mut body = raw[head_len..].to_vec();
    if let Some(length) = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        if body.len() < length {
            return Err("agent closed the connection mid-response".to_string());
        }
        body.truncate(length);
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_encoding_keeps_slashes() {
        assert_eq!(encode_path("a/b c?d"), "a/b%20c%3Fd");
        assert_eq!(encode_query_value("a/b"), "a%2Fb");
    }

    #[test]
    fn parses_responses() {
        let r = parse_response(
            b"HTTP/1.1 404 Not Found\r\nX-Consul-Index: 7\r\nContent-Length: 2\r\n\r\nhi",
        )
        .unwrap();
        assert_eq!(
            (r.status, r.header("x-consul-index"), &r.body[..]),
            (404, Some("7"), &b"hi"[..])
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi").is_err());
        assert!(parse_response(b"garbage").is_err());
    }
}
