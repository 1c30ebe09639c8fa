//! The proxy's HTTP client to its local agent, over monoio: one request per connection
//! (`Connection: close`), the answer read whole and bounded. Blocking queries are ordinary
//! requests with `?index=` and `?wait=`, their timeout a little past the wait.

use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use std::net::SocketAddr;
use std::time::Duration;

/// Largest answer accepted from the agent.
pub const ANSWER_BYTES_MAX: usize = 16 * 1024 * 1024;
/// How long one read chunk is.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// An agent's answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// `X-Consul-Index`, 0 when absent.
    pub index: u64,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Result<serde_json::Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("undecodable answer: {e}"))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).trim().to_string()
    }
}

/// The agent's address and token.
#[derive(Clone, Debug)]
pub struct AgentClient {
    pub addr: SocketAddr,
    pub token: Option<String>,
}

impl AgentClient {
    /// One request, answered within `timeout`.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Answer, String> {
        match monoio::time::timeout(timeout, self.exchange(method, path, body)).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "{method} {path}: no answer within {} ms",
                timeout.as_millis()
            )),
        }
    }

    pub async fn get(&self, path: &str, timeout: Duration) -> Result<Answer, String> {
        self.request("GET", path, b"", timeout).await
    }

    async fn exchange(&self, method: &str, path: &str, body: &[u8]) -> Result<Answer, String> {
        let mut stream = TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("error connecting to agent at {}: {e}", self.addr))?;
        let _ = stream.set_nodelay(true);
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: praetor-proxy\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(token) = self.token.as_deref().filter(|t| !t.is_empty()) {
            request.push_str(&format!("X-Consul-Token: {token}\r\n"));
        }
        if !body.is_empty() {
            request.push_str("Content-Type: application/json\r\n");
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        let (result, _) = stream.write_all(bytes).await;
        result.map_err(|e| format!("error sending to agent: {e}"))?;
        let mut raw: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
        loop {
            let chunk = Vec::with_capacity(READ_CHUNK_BYTES);
            let (result, chunk) = stream.read(chunk).await;
            let n = result.map_err(|e| format!("error reading from agent: {e}"))?;
            if n == 0 {
                break;
            }
            raw.extend_from_slice(&chunk[..n]);
            if raw.len() > ANSWER_BYTES_MAX {
                return Err(format!("agent answer exceeds {ANSWER_BYTES_MAX} bytes"));
            }
            if let Some(answer) = complete(&raw)? {
                return Ok(answer);
            }
        }
        complete(&raw)?.ok_or_else(|| "the agent closed the connection mid-answer".to_string())
    }
}

/// The answer in `raw` once it is whole (by `Content-Length`, or chunks ending).
fn complete(raw: &[u8]) -> Result<Option<Answer>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed answer from the agent: {e}")),
    };
    let status = response.code.unwrap_or(0);
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
    };
    let index = header("X-Consul-Index")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let rest = &raw[head_len..];
    if let Some(length) = header("Content-Length").and_then(|v| v.trim().parse::<usize>().ok()) {
        if rest.len() < length {
            return Ok(None);
        }
        return Ok(Some(Answer {
            status,
            index,
            body: rest[..length].to_vec(),
        }));
    }
    if header("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        return Ok(dechunk(rest).map(|body| Answer {
            status,
            index,
            body,
        }));
    }
    Ok(None)
}

/// A chunked body once its last chunk arrived.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        if rest.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_whole_by_length_or_by_chunks() {
        let partial = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Consul-Index: 42\r\n\r\nab";
        assert!(complete(partial).unwrap().is_none());
        let whole = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Consul-Index: 42\r\n\r\nabcde";
        let answer = complete(whole).unwrap().unwrap();
        assert_eq!(
            (answer.status, answer.index, &answer.body[..]),
            (200, 42, &b"abcde"[..])
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(complete(chunked).unwrap().unwrap().body, b"abcde");
        assert!(complete(b"garbage\r\n\r\n").is_err());
    }
}
