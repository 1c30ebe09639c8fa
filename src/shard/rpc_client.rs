//! Consul's RPC as a client: typed calls to a server, each on a yamux stream of one
//! connection per server, as Consul's connection pool makes them (`agent/pool`): byte 4,
//! or under `verify_outgoing` byte 3, a TLS handshake, then byte 4 inside the session.
//!
//! A call opens a stream, writes its net/rpc request (header, then body) and half-closes
//! the stream; the server answers and closes its side. The stream carries exactly one call,
//! so the answer's header needs no matching beyond the stream it came on. A connection is
//! kept per shard and per server while it works; a session that fails (a lost socket, a
//! GoAway, a keepalive that went unanswered) fails the calls waiting on it, and the next
//! call dials again.
//!
//! A failure says whether the call may have reached the server ([`CallError::sent`]), so a
//! caller knows when trying another server cannot apply a write twice.
//!
//! Bounds: [`CALLS_IN_FLIGHT_MAX`] calls per connection (below yamux's stream limit), an
//! answer of at most [`MESSAGE_BYTES_MAX`](crate::proto::msgpack_rpc::MESSAGE_BYTES_MAX) per
//! value, the caller's timeout per call, and dial and handshake timeouts.

use crate::proto::msgpack_rpc::{decode_response_header, encode_request, MessageReader};
use crate::proto::rpc_select::rpc_type;
use crate::proto::yamux::{Event, Role, Session, STREAMS_MAX};
use crate::tls::TlsConfigurator;
use bytes::{Bytes, BytesMut};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Calls waiting on one connection at most; beyond it a call fails unsent.
pub const CALLS_IN_FLIGHT_MAX: usize = STREAMS_MAX - 1;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// How often a session's keepalive is looked at.
const KEEPALIVE_TICK: Duration = Duration::from_secs(5);

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The server answered with an error (net/rpc's `Error`, Consul's words).
    Remote(String),
    /// The call did not complete: no connection, a lost one, a timeout.
    Transport { reason: String, sent: bool },
}

impl CallError {
    /// Whether the call may have reached the server (a remote answer always did).
    pub fn sent(&self) -> bool {
        match self {
            CallError::Remote(_) => true,
            CallError::Transport { sent, .. } => *sent,
        }
    }

    fn unsent(reason: String) -> CallError {
        CallError::Transport {
            reason,
            sent: false,
        }
    }

    fn lost(reason: String) -> CallError {
        CallError::Transport { reason, sent: true }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Remote(reason) => write!(f, "{reason}"),
            CallError::Transport { reason, .. } => write!(f, "{reason}"),
        }
    }
}

/// One call waiting for its answer.
struct Pending {
    buffer: BytesMut,
    reader: MessageReader,
    result: Option<Result<Bytes, CallError>>,
    waker: Option<Waker>,
}

struct Connection {
    session: Session,
    calls: HashMap<u32, Pending>,
    next_seq: u64,
    /// Why the connection can take no more calls.
    closed: Option<String>,
    doorbell: flume::Sender<()>,
}

impl Connection {
    fn ring(&self) {
        if self.session.has_output() {
            let _ = self.doorbell.try_send(());
        }
    }

    /// Ends the connection, failing every call still waiting.
    fn fail(&mut self, reason: &str) {
        if self.closed.is_none() {
            self.closed = Some(reason.to_string());
        }
        for pending in self.calls.values_mut() {
            if pending.result.is_none() {
                pending.result = Some(Err(CallError::lost(reason.to_string())));
                if let Some(waker) = pending.waker.take() {
                    waker.wake();
                }
            }
        }
        let _ = self.doorbell.try_send(());
    }

    /// Settles a call with its answer or error.
    fn settle(&mut self, id: u32, result: Result<Bytes, CallError>) {
        if let Some(pending) = self.calls.get_mut(&id) {
            if pending.result.is_none() {
                pending.result = Some(result);
                if let Some(waker) = pending.waker.take() {
                    waker.wake();
                }
            }
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Data(id, bytes) => {
                self.session.consumed(id, bytes.len());
                let Some(pending) = self.calls.get_mut(&id) else {
                    return;
                };
                pending.buffer.extend_from_slice(&bytes);
                let answer = match pending.reader.advance(&pending.buffer) {
                    Ok(None) => return,
                    Ok(Some(extent)) => {
                        let message = pending.buffer.split_to(extent.total()).freeze();
                        match decode_response_header(&message[..extent.header_length]) {
                            Ok(header) if header.error.is_empty() => {
                                Ok(message.slice(extent.header_length..))
                            }
                            Ok(header) => Err(CallError::Remote(header.error.to_string())),
                            Err(e) => Err(CallError::lost(format!("bad answer: {e}"))),
                        }
                    }
                    Err(e) => Err(CallError::lost(format!("bad answer: {e}"))),
                };
                self.settle(id, answer);
            }
            Event::Closed(id) => {
                self.settle(
                    id,
                    Err(CallError::lost(
                        "the server closed the call unanswered".into(),
                    )),
                );
            }
            Event::Reset(id) => {
                self.settle(id, Err(CallError::lost("the server reset the call".into())));
            }
            Event::GoAway => {
                // Calls in flight finish; new ones dial again.
                if self.closed.is_none() {
                    self.closed = Some("the server is going away".to_string());
                }
            }
            Event::Opened(id) => {
                // A server never opens streams to its client.
                self.session.reset(id);
            }
            Event::Established(_) => {}
        }
    }
}

/// The typed-call client of one shard: a connection per server.
pub struct RpcClient {
    connections: RefCell<HashMap<SocketAddr, Rc<RefCell<Connection>>>>,
    tls: Arc<TlsConfigurator>,
    /// The agent's bind address, which connections leave from (Consul's `RPCSrcAddr`).
    bind_addr: IpAddr,
    /// Where this shard's clock starts, for yamux keepalives.
    clock: Instant,
}

impl RpcClient {
    pub fn new(tls: Arc<TlsConfigurator>, bind_addr: IpAddr) -> RpcClient {
        RpcClient {
            connections: RefCell::default(),
            tls,
            bind_addr,
            clock: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// Calls `method` with `body` (one msgpack value) on the server at `addr` (of
    /// `datacenter`, whose server name a new TLS connection asks for; `None`: this
    /// agent's), waiting at most `timeout`; the reply's msgpack body.
    pub async fn call(
        &self,
        addr: SocketAddr,
        datacenter: Option<&str>,
        method: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, CallError> {
        let connection = self
            .connection(addr, datacenter)
            .await
            .map_err(CallError::unsent)?;
        let id = {
            let mut state = connection.borrow_mut();
            if let Some(reason) = &state.closed {
                return Err(CallError::unsent(reason.clone()));
            }
            if state.calls.len() >= CALLS_IN_FLIGHT_MAX {
                return Err(CallError::unsent(format!(
                    "too many calls in flight to {addr}"
                )));
            }
            let id = state
                .session
                .open()
                .map_err(|e| CallError::unsent(e.to_string()))?;
            state.next_seq += 1;
            let mut request = Vec::with_capacity(body.len() + method.len() + 32);
            encode_request(&mut request, method, state.next_seq, body);
            state.calls.insert(
                id,
                Pending {
                    buffer: BytesMut::new(),
                    reader: MessageReader::new(),
                    result: None,
                    waker: None,
                },
            );
            state.session.send(id, Bytes::from(request));
            state.session.close(id);
            state.ring();
            id
        };
        let answer = AnswerFuture {
            connection: connection.clone(),
            id,
        };
        match monoio::time::timeout(timeout, answer).await {
            Ok(result) => result,
            Err(_) => Err(CallError::lost(format!(
                "timed out after {timeout:?} waiting for {addr}"
            ))),
        }
    }

    /// The working connection to `addr`, dialed if there is none.
    async fn connection(
        &self,
        addr: SocketAddr,
        datacenter: Option<&str>,
    ) -> Result<Rc<RefCell<Connection>>, String> {
        if let Some(existing) = self.connections.borrow().get(&addr) {
            if existing.borrow().closed.is_none() {
                return Ok(existing.clone());
            }
        }
        let connection = self.dial(addr, datacenter).await?;
        self.connections
            .borrow_mut()
            .insert(addr, connection.clone());
        Ok(connection)
    }

    async fn dial(
        &self,
        addr: SocketAddr,
        datacenter: Option<&str>,
    ) -> Result<Rc<RefCell<Connection>>, String> {
        let source = crate::shard::dial::source_for(self.bind_addr, addr);
        let mut stream =
            match monoio::time::timeout(CONNECT_TIMEOUT, crate::shard::dial::connect(source, addr))
                .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Err(format!("cannot connect to {addr}: {e}")),
                Err(_) => return Err(format!("timed out connecting to {addr}")),
            };
        let _ = stream.set_nodelay(true);
        let tls = match datacenter {
            None => self.tls.rpc_client(),
            Some(datacenter) => self.tls.rpc_client_for(datacenter)?,
        };
        let (doorbell, rings) = flume::bounded::<()>(1);
        let connection = Rc::new(RefCell::new(Connection {
            session: Session::new(Role::Client, self.now_ms()),
            calls: HashMap::new(),
            next_seq: 0,
            closed: None,
            doorbell,
        }));
        let clock = self.clock;
        match tls {
            None => {
                let (written, _) = stream.write_all(vec![rpc_type::MULTIPLEX_V2]).await;
                written.map_err(|e| format!("cannot write to {addr}: {e}"))?;
                let (reader, writer) = stream.into_split();
                spawn_session(connection.clone(), reader, writer, rings, addr, clock);
            }
            Some((config, server_name)) => {
                let mut session =
                    super::forward::dial_tls(stream, config, server_name, addr).await?;
                let (written, _) = session.write_all(vec![rpc_type::MULTIPLEX_V2]).await;
                written.map_err(|e| format!("cannot write to {addr}: {e}"))?;
                let (reader, writer) = session.into_split();
                spawn_session(connection.clone(), reader, writer, rings, addr, clock);
            }
        }
        Ok(connection)
    }
}

fn spawn_session(
    connection: Rc<RefCell<Connection>>,
    reader: impl AsyncReadRent + 'static,
    writer: impl AsyncWriteRent + 'static,
    rings: flume::Receiver<()>,
    addr: SocketAddr,
    clock: Instant,
) {
    monoio::spawn(write_loop(connection.clone(), writer, rings));
    monoio::spawn(read_loop(connection.clone(), reader, addr));
    monoio::spawn(keep_alive(connection, clock));
}

async fn write_loop(
    connection: Rc<RefCell<Connection>>,
    mut writer: impl AsyncWriteRent,
    rings: flume::Receiver<()>,
) {
    while rings.recv_async().await.is_ok() {
        let (out, closed) = {
            let mut state = connection.borrow_mut();
            (state.session.take_outbox(), state.closed.is_some())
        };
        if !out.is_empty() {
            let (result, _) = writer.write_all(out).await;
            if result.is_err() {
                connection
                    .borrow_mut()
                    .fail("connection to the server lost while sending");
                return;
            }
        }
        let idle = connection.borrow().calls.is_empty();
        if closed && idle {
            let _ = writer.shutdown().await;
            return;
        }
    }
}

async fn read_loop(
    connection: Rc<RefCell<Connection>>,
    mut reader: impl AsyncReadRent,
    addr: SocketAddr,
) {
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut events = Vec::new();
    loop {
        if input.capacity() - input.len() < READ_CHUNK_BYTES / 4 {
            input.reserve(READ_CHUNK_BYTES);
        }
        let length = input.len();
        let (result, slice) = reader.read(input.slice_mut(length..)).await;
        input = slice.into_inner();
        let reason = match result {
            Ok(0) => Some(format!("connection to {addr} lost")),
            Err(e) => {
                let reason = crate::tls::stream::describe_io_error(&e);
                // Under TLS 1.3 a server that refuses our certificate says so after our side
                // of the handshake finished, on the first read: that is worth a line, as on
                // praetor's own frames (`shard::forward`).
                if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
                    log::warn!("tls: internal_rpc connection to {addr} ended: {reason}");
                }
                Some(format!("connection to {addr} lost: {reason}"))
            }
            Ok(_) => None,
        };
        let mut state = connection.borrow_mut();
        if let Some(reason) = reason {
            state.fail(&reason);
            return;
        }
        let received = state.session.receive(&mut input, &mut events);
        for event in events.drain(..) {
            state.on_event(event);
        }
        state.ring();
        if let Err(error) = received {
            state.fail(&format!("yamux session with {addr} ended: {error}"));
            return;
        }
    }
}

async fn keep_alive(connection: Rc<RefCell<Connection>>, clock: Instant) {
    loop {
        monoio::time::sleep(KEEPALIVE_TICK).await;
        let mut state = connection.borrow_mut();
        if state.closed.is_some() && state.calls.is_empty() {
            return;
        }
        if let Err(error) = state.session.tick(clock.elapsed().as_millis() as u64) {
            state.fail(&error.to_string());
            return;
        }
        state.ring();
    }
}

/// Waits for a call's answer; dropped early (a timeout), it resets the call's stream.
struct AnswerFuture {
    connection: Rc<RefCell<Connection>>,
    id: u32,
}

impl Future for AnswerFuture {
    type Output = Result<Bytes, CallError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.connection.borrow_mut();
        let Some(pending) = state.calls.get_mut(&self.id) else {
            return Poll::Ready(Err(CallError::lost("call abandoned".to_string())));
        };
        if let Some(result) = pending.result.take() {
            state.calls.remove(&self.id);
            return Poll::Ready(result);
        }
        pending.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for AnswerFuture {
    fn drop(&mut self) {
        let mut state = self.connection.borrow_mut();
        if state.calls.remove(&self.id).is_some() {
            // Unanswered: the server may drop the call's work.
            state.session.reset(self.id);
            state.ring();
        }
    }
}
