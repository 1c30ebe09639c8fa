//! Setup and control traffic that is not measured as load: preloading keys, registering
//! instances, reading an index, and the single write of `blocking-fanout`.
//!
//! It uses plain blocking sockets with read/write timeouts and the same response parser as
//! the load path. Bulk setup fans out over a few OS threads, each with one keep-alive
//! connection, and stops at the first error with a message naming the request.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::config::RunConfig;
use crate::http::{encode_request, parse_response_head, BodyFraming, ChunkedScanner};
use crate::net::{connect_tcp, Target};

/// OS threads used for bulk setup (preload, registration).
const SETUP_THREADS: usize = 8;

/// A complete response read by the blocking client.
#[derive(Clone, Debug)]
pub struct BlockingResponse {
    pub status: u16,
    pub consul_index: Option<u64>,
    pub body: Vec<u8>,
}

impl BlockingResponse {
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned()
    }
}

/// One keep-alive connection with blocking, time-bounded I/O.
pub struct BlockingClient {
    target: Target,
    timeout: Duration,
    stream: Option<TcpStream>,
    rbuf: Vec<u8>,
}

impl BlockingClient {
    pub fn new(target: &Target, timeout: Duration) -> Self {
        BlockingClient {
            target: target.clone(),
            timeout,
            stream: None,
            rbuf: Vec::new(),
        }
    }

    /// Opens the connection now (so a later request does not pay for the connect).
    pub fn connect(&mut self) -> Result<(), String> {
        if self.stream.is_none() {
            let stream = connect_tcp(self.target.addr, None, self.timeout)
                .map_err(|e| format!("connect to {}: {e}", self.target.addr))?;
            stream.set_nonblocking(false).map_err(|e| e.to_string())?;
            stream
                .set_read_timeout(Some(self.timeout))
                .map_err(|e| e.to_string())?;
            stream
                .set_write_timeout(Some(self.timeout))
                .map_err(|e| e.to_string())?;
            self.stream = Some(stream);
            self.rbuf.clear();
        }
        Ok(())
    }

    /// Sends one request and reads its response. The connection is dropped after an error or
    /// a `Connection: close`, and re-opened by the next request.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<BlockingResponse, String> {
        let result = self.try_request(method, path, content_type, body);
        if result.is_err() {
            self.stream = None;
        }
        result.map_err(|e| format!("{method} {path}: {e}"))
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<BlockingResponse, String> {
        self.connect()?;
        let mut request = Vec::with_capacity(256 + body.len());
        encode_request(
            &mut request,
            method,
            path,
            &self.target.authority,
            content_type,
            body,
        );
        let stream = self.stream.as_mut().expect("connected above");
        stream.write_all(&request).map_err(|e| e.to_string())?;
        let mut chunked = ChunkedScanner::new();
        let mut out = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(head) = parse_response_head(&self.rbuf).map_err(|e| e.to_string())? {
                let consumed = match head.framing {
                    BodyFraming::Length(n) if self.rbuf.len() >= head.head_len + n => {
                        out.extend_from_slice(&self.rbuf[head.head_len..head.head_len + n]);
                        Some(head.head_len + n)
                    }
                    BodyFraming::Length(_) | BodyFraming::UntilClose => None,
                    BodyFraming::Chunked => chunked
                        .scan(&self.rbuf[head.head_len..], Some(&mut out))
                        .map_err(|e| e.to_string())?
                        .map(|n| head.head_len + n),
                };
                if let Some(consumed) = consumed {
                    self.rbuf.drain(..consumed);
                    if (100..200).contains(&head.status) {
                        out.clear();
                        continue;
                    }
                    if head.connection_close {
                        self.stream = None;
                    }
                    return Ok(BlockingResponse {
                        status: head.status,
                        consul_index: head.consul_index,
                        body: out,
                    });
                }
                let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    if head.framing == BodyFraming::UntilClose {
                        out.extend_from_slice(&self.rbuf[head.head_len..]);
                        self.rbuf.clear();
                        self.stream = None;
                        return Ok(BlockingResponse {
                            status: head.status,
                            consul_index: head.consul_index,
                            body: out,
                        });
                    }
                    return Err("connection closed mid-response".into());
                }
                self.rbuf.extend_from_slice(&chunk[..n]);
                continue;
            }
            let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed before a response".into());
            }
            self.rbuf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Runs `count` setup requests over [`SETUP_THREADS`] connections; `request(client, i)` issues
/// request `i`. Stops at the first error.
pub fn parallel_setup<F>(
    target: &Target,
    timeout: Duration,
    count: usize,
    request: F,
) -> Result<(), String>
where
    F: Fn(&mut BlockingClient, usize) -> Result<(), String> + Sync,
{
    let threads = SETUP_THREADS.min(count.max(1));
    let failed = std::sync::Mutex::new(None::<String>);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let request = &request;
            let failed = &failed;
            scope.spawn(move || {
                let mut client = BlockingClient::new(target, timeout);
                for i in (t..count).step_by(threads) {
                    if failed.lock().map(|f| f.is_some()).unwrap_or(true) {
                        return;
                    }
                    if let Err(e) = request(&mut client, i) {
                        if let Ok(mut f) = failed.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                }
            });
        }
    });
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Writes every key of the run once, so reads find them.
pub fn preload_keys(config: &RunConfig, target: &Target) -> Result<(), String> {
    let value = crate::workloads::value_of(config.value_bytes);
    parallel_setup(target, config.timeout, config.keys, |client, i| {
        let key = crate::workloads::key_name(config, i);
        let mut request = Vec::new();
        let token = config.token_for(0);
        crate::workloads::encode_kv_put(&mut request, config, target, &key, &value, token);
        // Re-use the encoder's method/path/body by sending its bytes through the client.
        let (method, path, content_type, body) = split_encoded(&request);
        let response = client.request(method, path, content_type, body)?;
        if !(200..300).contains(&response.status) {
            return Err(format!(
                "preload of {key:?}: status {} {}",
                response.status,
                response.body_text()
            ));
        }
        Ok(())
    })
}

/// Splits a request produced by [`encode_request`] back into method, path, content type and
/// body, so setup can send exactly what the load path sends.
fn split_encoded(request: &[u8]) -> (&str, &str, Option<&str>, &[u8]) {
    let head_end = memchr::memmem::find(request, b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(request.len());
    let head = std::str::from_utf8(&request[..head_end]).unwrap_or("");
    let mut first = head.lines().next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("GET");
    let path = first.next().unwrap_or("/");
    let content_type = head.lines().find_map(|l| l.strip_prefix("Content-Type: "));
    (method, path, content_type, &request[head_end..])
}

/// Name of synthetic catalog node `n` holding instances of `service`.
pub fn instance_node(service: &str, n: usize) -> String {
    format!("loadgen-{service}-{n}")
}

/// Instance ID of synthetic instance `i` of `service`.
pub fn instance_id(service: &str, i: usize) -> String {
    format!("{service}-{i}")
}

/// Registers `count` instances of `service` (IDs `<service>-0…`), each with a passing check,
/// `--per-node` instances per catalog node.
pub fn register_instances(
    config: &RunConfig,
    target: &Target,
    service: &str,
    count: usize,
) -> Result<(), String> {
    parallel_setup(target, config.timeout, count, |client, i| {
        let id = instance_id(service, i);
        let node_index = i / config.per_node;
        let node = instance_node(service, node_index);
        let instance = crate::workloads::Instance {
            service,
            id: &id,
            node: &node,
            node_index,
            index: i,
        };
        let (path, body) = crate::workloads::registration(config.via, &instance);
        let response = client.request("PUT", path, Some("application/json"), body.as_bytes())?;
        if !(200..300).contains(&response.status) {
            return Err(format!(
                "register {id}: status {} {}",
                response.status,
                response.body_text()
            ));
        }
        Ok(())
    })
}

/// Number of entries in a JSON array answer (e.g. `/v1/health/service/<svc>`).
pub fn json_array_len(body: &[u8]) -> Option<usize> {
    match serde_json::from_slice::<serde_json::Value>(body).ok()? {
        serde_json::Value::Array(items) => Some(items.len()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_requests_split_back() {
        let mut req = Vec::new();
        encode_request(
            &mut req,
            "PUT",
            "/v1/kv/a",
            "h:1",
            Some("application/json"),
            b"{}",
        );
        assert_eq!(
            split_encoded(&req),
            ("PUT", "/v1/kv/a", Some("application/json"), &b"{}"[..])
        );
        let mut get = Vec::new();
        encode_request(&mut get, "GET", "/x?y", "h:1", None, b"");
        assert_eq!(split_encoded(&get), ("GET", "/x?y", None, &b""[..]));
    }

    #[test]
    fn json_array_lengths() {
        assert_eq!(json_array_len(b"[1,2,3]"), Some(3));
        assert_eq!(json_array_len(b"[]"), Some(0));
        assert_eq!(json_array_len(b"{}"), None);
        assert_eq!(json_array_len(b"nope"), None);
    }
}
