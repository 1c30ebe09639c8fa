//! The one place the operator commands build their HTTP client, from Consul's CLI flags and
//! environment variables with Consul's precedence, and a small blocking HTTP/1.1 client that
//! speaks to an agent's `/v1` API over TCP, TLS (rustls) or a Unix socket.
//!
//! Resolution follows Consul's `api.DefaultConfig` + `command/flags.HTTPFlags`: a flag wins
//! over its environment variable, which wins over the default; an empty variable counts as
//! unset. The variables are Consul's own (`CONSUL_HTTP_ADDR`, `CONSUL_HTTP_TOKEN`,
//! `CONSUL_HTTP_TOKEN_FILE`, `CONSUL_HTTP_AUTH`, `CONSUL_HTTP_SSL`, `CONSUL_HTTP_SSL_VERIFY`,
//! `CONSUL_CACERT`, `CONSUL_CAPATH`, `CONSUL_CLIENT_CERT`, `CONSUL_CLIENT_KEY`,
//! `CONSUL_TLS_SERVER_NAME`, `CONSUL_NAMESPACE`, `CONSUL_PARTITION`); praetor has none of its
//! own, so nothing can silently override them. Two Consul rules that surprise: a token file
//! (flag or variable) that holds a token wins over `-token`, and an `http://` address does not
//! turn TLS off when `CONSUL_HTTP_SSL` turned it on.
//!
//! Namespaces and partitions are Consul Enterprise features; a namespace or partition asked
//! for is refused before any request with the 400 answer Consul CE gives for `?ns=` and
//! `?partition=`, rather than sent and silently ignored.

use super::goflag::parse_go_bool;
use super::HttpFlags;
use crate::tls::files::{
    crypto_provider, load_ca_certificates, pem_certificates, pem_private_key, read_bounded,
    root_store, CaSource,
};
use crate::tls::verify::ChainVerifier;
use rustls::pki_types::ServerName;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where the CLI looks for the agent when nothing says otherwise.
pub const HTTP_ADDR_DEFAULT: &str = "127.0.0.1:8500";
/// Largest response body the CLI accepts (snapshots included).
const RESPONSE_BYTES_MAX: usize = 1 << 30;
/// Largest response head.
const RESPONSE_HEAD_BYTES_MAX: usize = 64 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Read timeout: blocking queries wait up to 10 minutes plus jitter on the agent.
const READ_TIMEOUT: Duration = Duration::from_secs(660);
/// Largest token file read; a token is a UUID.
const TOKEN_FILE_BYTES_MAX: u64 = 64 * 1024;

/// Consul CE's answer to a namespace (`agent/http_ce.go`).
const NAMESPACE_REFUSAL: &str =
    "Unexpected response code: 400 (Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature)";
/// Consul CE's answer to a partition.
const PARTITION_REFUSAL: &str = "Unexpected response code: 400 (Invalid query parameter: \"partition\" - Partitions are a Consul Enterprise feature)";

/// How the agent is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `host:port`.
    Tcp(String),
    /// A Unix socket path (`unix:///path`).
    Unix(PathBuf),
}

/// TLS for the connection: the rustls configuration and the name the certificate must carry.
#[derive(Clone)]
pub struct TlsSettings {
    pub config: Arc<rustls::ClientConfig>,
    pub server_name: ServerName<'static>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub transport: Transport,
    /// `Some` when the scheme is `https`.
    pub tls: Option<TlsSettings>,
    /// The `Host` header.
    pub host: String,
    /// A path prefix from the address (`https://gateway/consul` → `/consul`), for agents
    /// behind a reverse proxy.
    pub path_prefix: String,
    pub token: Option<String>,
    /// `CONSUL_HTTP_AUTH`: user and password for HTTP basic authentication.
    pub basic_auth: Option<(String, String)>,
    pub datacenter: Option<String>,
    pub namespace: Option<String>,
    pub partition: Option<String>,
    pub stale: bool,
    /// Read timeout; blocking queries need long ones.
    pub timeout: Duration,
}

/// Reads an environment variable; empty counts as unset, as `os.Getenv(...) != ""` does.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl ClientOptions {
    /// Resolves the flags of a command and the environment (`env`) into client options.
    pub fn resolve(
        flags: &HttpFlags,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ClientOptions, String> {
        let pick = |flag: &Option<String>, variable: &str| flag.clone().or_else(|| env(variable));
        let address = pick(&flags.http_addr, "CONSUL_HTTP_ADDR")
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| HTTP_ADDR_DEFAULT.to_string());
        let mut https = match env("CONSUL_HTTP_SSL") {
            None => false,
            Some(text) => parse_go_bool(&text).unwrap_or_else(|| {
                eprintln!("[WARN]  consul-api: could not parse CONSUL_HTTP_SSL: {text:?}");
                false
            }),
        };
        let (scheme, rest) = match address.split_once("://") {
            Some((scheme, rest)) => (Some(scheme), rest),
            None => (None, address.as_str()),
        };
        let (transport, host, path_prefix) = match scheme {
            Some("unix") => (
                Transport::Unix(PathBuf::from(rest)),
                "localhost".to_string(),
                String::new(),
            ),
            Some("https") | Some("http") | None => {
                // An `http://` address never turns off TLS that CONSUL_HTTP_SSL turned on.
                https |= scheme == Some("https");
                let (authority, prefix) = match rest.split_once('/') {
                    Some((authority, prefix)) => (authority, format!("/{prefix}")),
                    None => (rest, String::new()),
                };
                let prefix = prefix.trim_end_matches('/').to_string();
                let authority = authority.to_string();
                (Transport::Tcp(authority.clone()), authority, prefix)
            }
            Some(other) => return Err(format!("Unknown protocol scheme: {other}")),
        };

        let mut token = pick(&flags.token, "CONSUL_HTTP_TOKEN").filter(|t| !t.is_empty());
        if let Some(file) =
            pick(&flags.token_file, "CONSUL_HTTP_TOKEN_FILE").filter(|f| !f.is_empty())
        {
            let data = read_bounded(Path::new(&file), TOKEN_FILE_BYTES_MAX, "token file")
                .map_err(|e| format!("Error loading token file: {e}"))?;
            let text = String::from_utf8_lossy(&data).trim().to_string();
            if !text.is_empty() {
                token = Some(text);
            }
        }
        let basic_auth = env("CONSUL_HTTP_AUTH").map(|auth| match auth.split_once(':') {
            Some((user, password)) => (user.to_string(), password.to_string()),
            None => (auth, String::new()),
        });

        let tls = if https {
            let server_name = pick(&flags.tls_server_name, "CONSUL_TLS_SERVER_NAME")
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| host.clone());
            let verify = match env("CONSUL_HTTP_SSL_VERIFY") {
                None => true,
                Some(text) => parse_go_bool(&text).unwrap_or_else(|| {
                    eprintln!(
                        "[WARN]  consul-api: could not parse CONSUL_HTTP_SSL_VERIFY: {text:?}"
                    );
                    true
                }),
            };
            Some(tls_settings(&TlsFiles {
                server_name,
                ca_file: pick(&flags.ca_file, "CONSUL_CACERT"),
                ca_path: pick(&flags.ca_path, "CONSUL_CAPATH"),
                client_cert: pick(&flags.client_cert, "CONSUL_CLIENT_CERT"),
                client_key: pick(&flags.client_key, "CONSUL_CLIENT_KEY"),
                verify,
            })?)
        } else {
            None
        };

        Ok(ClientOptions {
            transport,
            tls,
            host,
            path_prefix,
            token,
            basic_auth,
            datacenter: flags.datacenter.clone().filter(|d| !d.is_empty()),
            namespace: pick(&flags.namespace, "CONSUL_NAMESPACE").filter(|n| !n.is_empty()),
            partition: pick(&flags.partition, "CONSUL_PARTITION").filter(|p| !p.is_empty()),
            stale: flags.stale,
            timeout: READ_TIMEOUT,
        })
    }
}

/// The TLS inputs, after flags and environment were resolved.
struct TlsFiles {
    server_name: String,
    ca_file: Option<String>,
    ca_path: Option<String>,
    client_cert: Option<String>,
    client_key: Option<String>,
    verify: bool,
}

/// Strips a port from a server name (`consul.local:8501` → `consul.local`, `[::1]:8501` →
/// `::1`), as Consul's `SetupTLSConfig` does.
fn host_of(name: &str) -> &str {
    let has_port = name.rfind(':').is_some_and(|colon| {
        name.rfind(']').is_none_or(|bracket| colon > bracket)
            && (name.starts_with('[') || name.matches(':').count() == 1)
    });
    let host = if has_port {
        &name[..name.rfind(':').expect("has a colon")]
    } else {
        name
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

fn tls_settings(files: &TlsFiles) -> Result<TlsSettings, String> {
    let server_name = ServerName::try_from(host_of(&files.server_name).to_string())
        .map_err(|e| format!("invalid TLS server name {:?}: {e}", files.server_name))?;
    let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let builder = if files.verify {
        // As Go's rootcerts: a CA file wins over a CA directory; neither means system roots.
        let source = CaSource {
            file: files
                .ca_file
                .as_deref()
                .filter(|f| !f.is_empty())
                .map(PathBuf::from),
            path: files
                .ca_path
                .as_deref()
                .filter(|d| !d.is_empty())
                .map(PathBuf::from),
        };
        let roots = match load_ca_certificates(&source)? {
            Some(certificates) => {
                root_store(&certificates).map_err(|e| format!("Error loading CA: {e}"))?
            }
            None => {
                let mut roots = rustls::RootCertStore::empty();
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
                roots
            }
        };
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainVerifier::accept_any()))
    };
    let config = match (&files.client_cert, &files.client_key) {
        (Some(cert), Some(key)) if !cert.is_empty() && !key.is_empty() => {
            let chain = pem_certificates(Path::new(cert), "Error loading client certificate")?;
            let key = pem_private_key(Path::new(key), "Error loading client key")?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("Error loading client certificate: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) if cert.is_empty() && key.is_empty() => {
            builder.with_no_client_auth()
        }
        _ => return Err("both client cert and client key must be provided".to_string()),
    };
    Ok(TlsSettings {
        config: Arc::new(config),
        server_name,
    })
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

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

pub struct Client {
    pub options: ClientOptions,
}

impl Client {
    pub fn new(options: ClientOptions) -> Self {
        Client { options }
    }

    /// Adds `dc` and `stale` to a query string as the command's flags say.
    fn with_common_query(&self, path_and_query: &str) -> String {
        let mut target = format!("{}{path_and_query}", self.options.path_prefix);
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

    fn connect(&self, timeout: Duration) -> Result<Box<dyn Stream>, String> {
        let timeout = Some(timeout);
        let plain: Box<dyn Stream> = match &self.options.transport {
            Transport::Tcp(address) => {
                let socket_addr = std::net::ToSocketAddrs::to_socket_addrs(address)
                    .map_err(|e| format!("cannot resolve agent address {address}: {e}"))?
                    .next()
                    .ok_or_else(|| format!("cannot resolve agent address {address}"))?;
                let stream = TcpStream::connect_timeout(&socket_addr, CONNECT_TIMEOUT)
                    .map_err(|e| format!("error connecting to agent at {address}: {e}"))?;
                stream.set_read_timeout(timeout).ok();
                stream.set_write_timeout(timeout).ok();
                Box::new(stream)
            }
            Transport::Unix(path) => {
                let stream = UnixStream::connect(path).map_err(|e| {
                    format!(
                        "error connecting to agent at unix://{}: {e}",
                        path.display()
                    )
                })?;
                stream.set_read_timeout(timeout).ok();
                stream.set_write_timeout(timeout).ok();
                Box::new(stream)
            }
        };
        match &self.options.tls {
            None => Ok(plain),
            Some(tls) => {
                let connection =
                    rustls::ClientConnection::new(tls.config.clone(), tls.server_name.clone())
                        .map_err(|e| format!("TLS setup failed: {e}"))?;
                Ok(Box::new(rustls::StreamOwned::new(connection, plain)))
            }
        }
    }

    pub fn request(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, String> {
        let mut stream = self.send(method, path_and_query, body, self.options.timeout)?;
        let host = &self.options.host;
        read_response(&mut *stream).map_err(|e| format!("error reading response from {host}: {e}"))
    }

    /// Sends a request whose answer is a stream (`/v1/agent/monitor`) and hands each piece of
    /// its body to `on_data` as it arrives, or `None` after every `tick` of silence, until
    /// `on_data` returns false or the body ends. A non-2xx answer is an error with its text.
    pub fn stream(
        &self,
        method: &str,
        path_and_query: &str,
        tick: Duration,
        on_data: &mut dyn FnMut(Option<&[u8]>) -> bool,
    ) -> Result<StreamEnd, String> {
        let host = &self.options.host;
        let mut stream = self.send(method, path_and_query, None, tick)?;
        read_stream(&mut *stream, self.options.timeout, on_data)
            .map_err(|e| format!("error reading response from {host}: {e}"))
    }

    /// Connects and sends one request; the answer is the caller's to read.
    fn send(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<&[u8]>,
        read_timeout: Duration,
    ) -> Result<Box<dyn Stream>, String> {
        if self.options.namespace.is_some() {
            return Err(NAMESPACE_REFUSAL.to_string());
        }
        if self.options.partition.is_some() {
            return Err(PARTITION_REFUSAL.to_string());
        }
        let target = self.with_common_query(path_and_query);
        let host = &self.options.host;
        let mut stream = self.connect(read_timeout)?;
        let mut request = format!(
            "{method} {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: praetor-cli\r\nConnection: close\r\n"
        );
        if let Some(token) = &self.options.token {
            request.push_str(&format!("X-Consul-Token: {token}\r\n"));
        }
        if let Some((user, password)) = &self.options.basic_auth {
            use base64::Engine;
            let credentials =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            request.push_str(&format!("Authorization: Basic {credentials}\r\n"));
        }
        let body = body.unwrap_or(b"");
        if method != "GET" || !body.is_empty() {
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        if !body.is_empty() {
            request.push_str("Content-Type: application/json\r\n");
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        stream
            .write_all(&bytes)
            .and_then(|()| stream.flush())
            .map_err(|e| {
                format!(
                    "error sending request to {host}: {}",
                    crate::tls::stream::describe_io_error(&e)
                )
            })?;
        Ok(stream)
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

/// How a response body ends.
enum Framing {
    Length(usize),
    Chunked,
    /// Until the connection closes.
    Close,
}

struct Head {
    status: u16,
    headers: Vec<(String, String)>,
    length: usize,
}

fn parse_head(raw: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let length = match parsed.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed response from agent: {e}")),
    };
    Ok(Some(Head {
        status: parsed.code.unwrap_or(0),
        headers: parsed
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
        length,
    }))
}

fn framing_of(headers: &[(String, String)]) -> Result<Framing, String> {
    let value = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if value("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        return Ok(Framing::Chunked);
    }
    match value("content-length") {
        Some(text) => {
            let length: usize = text
                .trim()
                .parse()
                .map_err(|_| format!("malformed Content-Length {text:?}"))?;
            if length > RESPONSE_BYTES_MAX {
                return Err(format!("response larger than {RESPONSE_BYTES_MAX} bytes"));
            }
            Ok(Framing::Length(length))
        }
        None => Ok(Framing::Close),
    }
}

/// How a streamed answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The caller stopped reading.
    Stopped,
    /// The agent ended the body or closed the connection.
    Ended,
}

/// Reads a streamed answer: the head (within `head_timeout` of ticks), then the body piece
/// by piece, decoded from chunked framing when it is.
fn read_stream(
    stream: &mut dyn Stream,
    head_timeout: Duration,
    on_data: &mut dyn FnMut(Option<&[u8]>) -> bool,
) -> Result<StreamEnd, String> {
    let mut reader = StreamReader {
        stream,
        raw: Vec::new(),
        buffer: vec![0u8; 64 * 1024],
    };
    let head = reader.head(head_timeout)?;
    let framing = framing_of(&head.headers)?;
    if !(200..300).contains(&head.status) {
        return Err(reader.error_answer(&head, &framing)?);
    }
    reader.body(head.length, matches!(framing, Framing::Chunked), on_data)
}

/// A streamed answer's connection and the bytes read from it not yet handed on.
struct StreamReader<'s> {
    stream: &'s mut dyn Stream,
    raw: Vec<u8>,
    buffer: Vec<u8>,
}

impl StreamReader<'_> {
    /// Reads once into `raw`. `Some(n)`: n bytes read (`Some(0)`: end of stream); `None`: a
    /// tick of silence.
    fn fill(&mut self) -> Result<Option<usize>, String> {
        match self.stream.read(&mut self.buffer) {
            Ok(n) => {
                self.raw.extend_from_slice(&self.buffer[..n]);
                Ok(Some(n))
            }
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(Some(0)),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Reads until the head is whole, at most [`RESPONSE_HEAD_BYTES_MAX`] of it, giving up
    /// after `timeout` of silence.
    fn head(&mut self, timeout: Duration) -> Result<Head, String> {
        let started = std::time::Instant::now();
        loop {
            if let Some(head) = parse_head(&self.raw)? {
                return Ok(head);
            }
            if self.raw.len() > RESPONSE_HEAD_BYTES_MAX {
                return Err(format!(
                    "response head larger than {RESPONSE_HEAD_BYTES_MAX} bytes"
                ));
            }
            match self.fill()? {
                Some(0) => {
                    return Err("agent closed the connection before a complete response".to_string())
                }
                Some(_) => {}
                None if started.elapsed() > timeout => {
                    return Err("timed out waiting for the agent".to_string())
                }
                None => {}
            }
        }
    }

    /// An error answer is small and complete: read whole, and worded as Consul's client
    /// words it.
    fn error_answer(&mut self, head: &Head, framing: &Framing) -> Result<String, String> {
        let mut body = self.raw[head.length..].to_vec();
        while let Framing::Length(length) = *framing {
            if body.len() >= length {
                break;
            }
            match self.fill()? {
                Some(0) => break,
                _ => body = self.raw[head.length..].to_vec(),
            }
        }
        Ok(format!(
            "Unexpected response code: {} ({})",
            head.status,
            String::from_utf8_lossy(&body).trim()
        ))
    }

    /// Hands the body on piece by piece from `consumed` (the head's end), `on_data(None)` at
    /// each tick of silence, until the body ends or `on_data` says stop.
    fn body(
        &mut self,
        mut consumed: usize,
        chunked: bool,
        on_data: &mut dyn FnMut(Option<&[u8]>) -> bool,
    ) -> Result<StreamEnd, String> {
        let mut decoder = crate::proto::http::ChunkedDecoder::default();
        let mut decoded = Vec::new();
        loop {
            if chunked {
                consumed += decoder
                    // A stream may run for days: what bounds memory is that each read is
                    // handed on at once, not a total.
                    .decode(&self.raw[consumed..], &mut decoded, usize::MAX)
                    .map_err(|e| format!("malformed chunked response: {}", e.message))?;
                self.raw.drain(..consumed);
                consumed = 0;
                if !decoded.is_empty() && !on_data(Some(&decoded)) {
                    return Ok(StreamEnd::Stopped);
                }
                decoded.clear();
                if decoder.is_done() {
                    return Ok(StreamEnd::Ended);
                }
            } else if self.raw.len() > consumed {
                if !on_data(Some(&self.raw[consumed..])) {
                    return Ok(StreamEnd::Stopped);
                }
                self.raw.clear();
                consumed = 0;
            }
            match self.fill()? {
                Some(0) => return Ok(StreamEnd::Ended),
                Some(_) => {}
                None => {
                    if !on_data(None) {
                        return Ok(StreamEnd::Stopped);
                    }
                }
            }
        }
    }
}

/// Reads one response. A TLS peer that closes without `close_notify` is tolerated once the
/// response is complete, as Go's client does.
fn read_response(stream: &mut dyn Stream) -> Result<Response, String> {
    let mut raw: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut eof = false;
    let mut fill = |raw: &mut Vec<u8>, eof: &mut bool| -> Result<(), String> {
        match stream.read(&mut buffer) {
            Ok(0) => *eof = true,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => *eof = true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // A TLS failure reads as `praetor tls` words it (wrong CA, expiry, name).
            Err(e) => return Err(crate::tls::stream::describe_io_error(&e)),
        }
        Ok(())
    };
    let head = loop {
        if let Some(head) = parse_head(&raw)? {
            break head;
        }
        if raw.len() > RESPONSE_HEAD_BYTES_MAX {
            return Err(format!(
                "response head larger than {RESPONSE_HEAD_BYTES_MAX} bytes"
            ));
        }
        if eof {
            return Err("agent closed the connection before a complete response".to_string());
        }
        fill(&mut raw, &mut eof)?;
    };
    let mut body = Vec::new();
    let mut consumed = head.length;
    match framing_of(&head.headers)? {
        Framing::Length(length) => {
            while raw.len() - head.length < length && !eof {
                fill(&mut raw, &mut eof)?;
            }
            if raw.len() - head.length < length {
                return Err("agent closed the connection mid-response".to_string());
            }
            body.extend_from_slice(&raw[head.length..head.length + length]);
        }
        Framing::Chunked => {
            let mut decoder = crate::proto::http::ChunkedDecoder::default();
            loop {
                consumed += decoder
                    .decode(&raw[consumed..], &mut body, RESPONSE_BYTES_MAX)
                    .map_err(|e| format!("malformed chunked response: {}", e.message))?;
                if decoder.is_done() {
                    break;
                }
                if eof {
                    return Err("agent closed the connection mid-response".to_string());
                }
                fill(&mut raw, &mut eof)?;
            }
        }
        Framing::Close => {
            while !eof {
                if raw.len() - head.length > RESPONSE_BYTES_MAX {
                    return Err(format!("response larger than {RESPONSE_BYTES_MAX} bytes"));
                }
                fill(&mut raw, &mut eof)?;
            }
            body.extend_from_slice(&raw[head.length..]);
        }
    }
    Ok(Response {
        status: head.status,
        headers: head.headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned().filter(|v| !v.is_empty())
    }

    fn resolve(flags: &HttpFlags, pairs: &[(&str, &str)]) -> Result<ClientOptions, String> {
        ClientOptions::resolve(flags, &env_of(pairs))
    }

    #[test]
    fn path_encoding_keeps_slashes() {
        assert_eq!(encode_path("a/b c?d"), "a/b%20c%3Fd");
        assert_eq!(encode_query_value("a/b"), "a%2Fb");
    }

    #[test]
    fn parses_responses() {
        let mut input: &[u8] =
            b"HTTP/1.1 404 Not Found\r\nX-Consul-Index: 7\r\nContent-Length: 2\r\n\r\nhi";
        let mut stream = ReadOnly(&mut input);
        let r = read_response(&mut stream).unwrap();
        assert_eq!(
            (r.status, r.header("x-consul-index"), &r.body[..]),
            (404, Some("7"), &b"hi"[..])
        );
        let mut input: &[u8] =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n";
        assert_eq!(
            read_response(&mut ReadOnly(&mut input)).unwrap().body,
            b"hello"
        );
        let mut input: &[u8] = b"HTTP/1.0 200 OK\r\n\r\nuntil close";
        assert_eq!(
            read_response(&mut ReadOnly(&mut input)).unwrap().body,
            b"until close"
        );
        let mut input: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi";
        assert!(read_response(&mut ReadOnly(&mut input)).is_err());
        let mut input: &[u8] = b"garbage";
        assert!(read_response(&mut ReadOnly(&mut input)).is_err());
    }

    /// A byte slice as a stream whose writes go nowhere.
    struct ReadOnly<'a, 'b>(&'a mut &'b [u8]);
    impl Read for ReadOnly<'_, '_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl Write for ReadOnly<'_, '_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn flags_win_over_environment_and_defaults_apply() {
        let none = HttpFlags::default();
        let o = resolve(&none, &[]).unwrap();
        assert_eq!(o.transport, Transport::Tcp(HTTP_ADDR_DEFAULT.into()));
        assert!(o.tls.is_none() && o.token.is_none() && o.basic_auth.is_none());
        let env = [
            ("CONSUL_HTTP_ADDR", "10.0.0.1:8500"),
            ("CONSUL_HTTP_TOKEN", "env-token"),
            ("CONSUL_HTTP_AUTH", "user:pa:ss"),
        ];
        let o = resolve(&none, &env).unwrap();
        assert_eq!(o.transport, Transport::Tcp("10.0.0.1:8500".into()));
        assert_eq!(o.token.as_deref(), Some("env-token"));
        assert_eq!(o.basic_auth, Some(("user".into(), "pa:ss".into())));
        let flags = HttpFlags {
            http_addr: Some("http://10.0.0.2:18500/".into()),
            token: Some("flag-token".into()),
            ..Default::default()
        };
        let o = resolve(&flags, &env).unwrap();
        assert_eq!(o.transport, Transport::Tcp("10.0.0.2:18500".into()));
        assert_eq!(o.token.as_deref(), Some("flag-token"));
        let o = resolve(
            &none,
            &[("CONSUL_HTTP_AUTH", "only-user"), ("CONSUL_HTTP_ADDR", "")],
        )
        .unwrap();
        assert_eq!(o.basic_auth, Some(("only-user".into(), String::new())));
        assert_eq!(o.transport, Transport::Tcp(HTTP_ADDR_DEFAULT.into()));
    }

    #[test]
    fn schemes_prefixes_and_unix_sockets() {
        let flags = |addr: &str| HttpFlags {
            http_addr: Some(addr.into()),
            ..Default::default()
        };
        let o = resolve(&flags("unix:///run/consul.sock"), &[]).unwrap();
        assert_eq!(o.transport, Transport::Unix("/run/consul.sock".into()));
        let o = resolve(&flags("https://127.0.0.1:8501/gateway/consul"), &[]).unwrap();
        assert_eq!(o.transport, Transport::Tcp("127.0.0.1:8501".into()));
        assert_eq!(o.path_prefix, "/gateway/consul");
        assert_eq!(
            o.tls.unwrap().server_name,
            ServerName::try_from("127.0.0.1").unwrap()
        );
        // CONSUL_HTTP_SSL turns TLS on, and an http:// address does not turn it off.
        let o = resolve(
            &flags("http://localhost:8501"),
            &[("CONSUL_HTTP_SSL", "true")],
        )
        .unwrap();
        assert!(o.tls.is_some());
        let o = resolve(&flags("localhost:8500"), &[("CONSUL_HTTP_SSL", "0")]).unwrap();
        assert!(o.tls.is_none());
        assert_eq!(
            resolve(&flags("ftp://x"), &[]).unwrap_err(),
            "Unknown protocol scheme: ftp"
        );
        // The server name comes from the flag, then the variable; a port is stripped.
        let with_name = HttpFlags {
            http_addr: Some("https://127.0.0.1:8501".into()),
            tls_server_name: Some("server.dc1.consul:8501".into()),
            ..Default::default()
        };
        let o = resolve(&with_name, &[("CONSUL_TLS_SERVER_NAME", "other")]).unwrap();
        assert_eq!(
            o.tls.unwrap().server_name,
            ServerName::try_from("server.dc1.consul").unwrap()
        );
        assert_eq!(host_of("[::1]:8501"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("name"), "name");
    }

    #[test]
    fn token_files_win_and_namespaces_are_refused() {
        let dir = std::env::temp_dir().join(format!("praetor-cli-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "  file-token\n").unwrap();
        let file_text = file.display().to_string();
        // A token file holding a token wins even over -token, as in Consul's api client.
        let flags = HttpFlags {
            token: Some("flag-token".into()),
            ..Default::default()
        };
        let o = resolve(&flags, &[("CONSUL_HTTP_TOKEN_FILE", &file_text)]).unwrap();
        assert_eq!(o.token.as_deref(), Some("file-token"));
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let flags = HttpFlags {
            token: Some("flag-token".into()),
            token_file: Some(empty.display().to_string()),
            ..Default::default()
        };
        assert_eq!(
            resolve(&flags, &[]).unwrap().token.as_deref(),
            Some("flag-token")
        );
        let missing = HttpFlags {
            token_file: Some(dir.join("missing").display().to_string()),
            ..Default::default()
        };
        assert!(resolve(&missing, &[])
            .unwrap_err()
            .starts_with("Error loading token file: token file"));
        std::fs::remove_dir_all(&dir).unwrap();

        let o = resolve(&HttpFlags::default(), &[("CONSUL_NAMESPACE", "team-a")]).unwrap();
        let err = Client::new(o)
            .request("GET", "/v1/kv/x", None)
            .err()
            .unwrap();
        assert_eq!(err, NAMESPACE_REFUSAL);
        let o = resolve(&HttpFlags::default(), &[("CONSUL_PARTITION", "p")]).unwrap();
        let err = Client::new(o)
            .request("GET", "/v1/kv/x", None)
            .err()
            .unwrap();
        assert_eq!(err, PARTITION_REFUSAL);
    }

    #[test]
    fn client_certificates_come_in_pairs() {
        let flags = HttpFlags {
            http_addr: Some("https://127.0.0.1:8501".into()),
            client_cert: Some("/nonexistent/cert.pem".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve(&flags, &[]).unwrap_err(),
            "both client cert and client key must be provided"
        );
        let flags = HttpFlags {
            http_addr: Some("https://127.0.0.1:8501".into()),
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        assert!(resolve(&flags, &[])
            .unwrap_err()
            .starts_with("Error loading CA File:"));
    }
}
