//! Consul's RPC as a client: typed calls to a server, each on a yamux stream of one
//! connection per server, as Consul's connection pool makes them (`agent/pool`): byte 4,
//! or under `verify_outgoing` byte 3, a TLS handshake, then byte 4 inside the session.
//!
//! A call takes an idle stream of the connection, or opens one, and writes its net/rpc
//! request (header, then body); the server answers on the same stream. A stream carries one
//! call at a time, so the answer's header needs no matching beyond the stream it came on.
//! Once answered, the stream goes back to the connection's idle streams for the next call
//! (each yamux stream is one net/rpc codec, which serves any number of calls in order), so
//! a busy agent does not open, acknowledge and close a stream per call; a stream whose call
//! failed, timed out or left stray bytes is reset instead, and at most
//! [`IDLE_STREAMS_MAX`] idle streams are kept (more are closed). A connection is kept per
//! shard and per server while it works; a session that fails (a lost socket, a GoAway, a
//! keepalive that went unanswered) fails the calls waiting on it, and the next call dials
//! again.
//!
//! A failure says whether the call may have reached the server ([`CallError::sent`]), so a
//! caller knows when trying another server cannot apply a write twice.
//!
//! Bounds: [`CALLS_IN_FLIGHT_MAX`] calls per connection (below yamux's stream limit),
//! [`IDLE_STREAMS_MAX`] idle streams, an answer of at most [`MESSAGE_BYTES_MAX`](crate::proto::msgpack_rpc::MESSAGE_BYTES_MAX) per
//! value, the caller's timeout per call, and dial and handshake timeouts.

use crate::proto::msgpack_rpc::{decode_response_header, encode_request, MessageAssembler};
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
/// Answered streams kept open per connection for later calls; beyond it a stream is closed
/// once its call is answered. As many as the calls a busy shard has in flight at once.
pub const IDLE_STREAMS_MAX: usize = 128;
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
    /// The answer's bytes as they arrive; an answer inside one frame is not copied.
    answer: MessageAssembler,
    result: Option<Result<Bytes, CallError>>,
    waker: Option<Waker>,
}

struct Connection {
    session: Session,
    calls: HashMap<u32, Pending, ahash::RandomState>,
    /// Open streams whose last call was answered, ready for the next one.
    idle: Vec<u32>,
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

    /// A stream whose call ended: back to the idle streams when its answer came whole and
    /// alone and the connection takes more calls; else reset (a failed or abandoned call, or
    /// stray bytes after the answer) or, with enough idle streams, closed.
    fn retire(&mut self, id: u32, pending: &Pending, answered: bool) {
        if !self.session.is_open(id) {
            return;
        }
        if !answered || !pending.answer.is_empty() {
            self.session.reset(id);
        } else if self.closed.is_none() && self.idle.len() < IDLE_STREAMS_MAX {
            self.idle.push(id);
        } else {
            self.session.close(id);
        }
        self.ring();
    }

    /// A stream for the next call: an idle one, else a new one.
    fn stream(&mut self) -> Result<u32, crate::proto::yamux::YamuxError> {
        while let Some(id) = self.idle.pop() {
            if self.session.is_open(id) {
                return Ok(id);
            }
        }
        self.session.open()
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Data(id, bytes) => {
                self.session.consumed(id, bytes.len());
                let Some(pending) = self.calls.get_mut(&id) else {
                    return;
                };
                if pending.result.is_some() {
                    // Bytes beyond the answer: the stream is not reused (see `retire`).
                    pending.answer.push(bytes);
                    return;
                }
                pending.answer.push(bytes);
                let answer = match pending.answer.next_message() {
                    Ok(None) => return,
                    Ok(Some((message, header_length))) => {
                        match decode_response_header(&message[..header_length]) {
                            Ok(header) if header.error.is_empty() => {
                                Ok(message.slice(header_length..))
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
                // An idle stream the server closed is closed here too, and forgotten.
                if let Some(position) = self.idle.iter().position(|&idle| idle == id) {
                    self.idle.swap_remove(position);
                    self.session.close(id);
                }
            }
            Event::Reset(id) => {
                self.settle(id, Err(CallError::lost("the server reset the call".into())));
                self.idle.retain(|&idle| idle != id);
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

/// A connection through a mesh gateway: the gateway's address and the server name asked
/// for in the handshake.
type GatewayRoute = (SocketAddr, String);

/// The typed-call client of one shard: a connection per server.
pub struct RpcClient {
    connections: RefCell<HashMap<SocketAddr, Rc<RefCell<Connection>>>>,
    /// Connections through mesh gateways, by gateway and the server name asked for: each is
    /// a TLS session with that one server, which the gateway splices through.
    through_gateways: RefCell<HashMap<GatewayRoute, Rc<RefCell<Connection>>>>,
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
            through_gateways: RefCell::default(),
            tls,
            bind_addr,
            clock: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// How connections of this client use TLS; a snapshot's own connection
    /// (`shard::snapshot_stream`) dials as these do.
    pub fn tls(&self) -> &TlsConfigurator {
        &self.tls
    }

    /// The address connections leave from.
    pub fn bind_addr(&self) -> IpAddr {
        self.bind_addr
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
        self.call_on(&connection, addr, method, body, timeout).await
    }

    /// [`RpcClient::call`] on the server `node` of `datacenter` through the mesh gateway at
    /// `gateway` (WAN federation through mesh gateways): native TLS with ALPN
    /// `consul/rpc-multi` and the server's own name, so the gateway hands the session to
    /// that server, and yamux inside it as on byte 4.
    pub async fn call_through_gateway(
        &self,
        gateway: SocketAddr,
        node: &str,
        datacenter: &str,
        method: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, CallError> {
        let (config, server_name) = self
            .tls
            .native_rpc_client(node, datacenter, crate::proto::rpc_select::alpn::RPC_MULTI)
            .map_err(CallError::unsent)?;
        let key = (gateway, server_name.to_str().into_owned());
        let existing = self.through_gateways.borrow().get(&key).cloned();
        let connection = match existing {
            Some(connection) if connection.borrow().closed.is_none() => connection,
            _ => {
                let stream = self.connect(gateway).await.map_err(CallError::unsent)?;
                let session = super::forward::dial_native_tls(stream, config, server_name, gateway)
                    .await
                    .map_err(CallError::unsent)?;
                let connection = self.new_connection();
                let (reader, writer) = session.into_split();
                let rings = connection.1;
                spawn_session(
                    connection.0.clone(),
                    reader,
                    writer,
                    rings,
                    gateway,
                    self.clock,
                );
                self.through_gateways
                    .borrow_mut()
                    .insert(key, connection.0.clone());
                connection.0
            }
        };
        self.call_on(&connection, gateway, method, body, timeout)
            .await
    }

    /// One call on `connection` (to `addr`, named in errors).
    async fn call_on(
        &self,
        connection: &Rc<RefCell<Connection>>,
        addr: SocketAddr,
        method: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, CallError> {
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
                .stream()
                .map_err(|e| CallError::unsent(e.to_string()))?;
            state.next_seq += 1;
            let mut request = Vec::with_capacity(body.len() + method.len() + 32);
            encode_request(&mut request, method, state.next_seq, body);
            state.calls.insert(
                id,
                Pending {
                    answer: MessageAssembler::default(),
                    result: None,
                    waker: None,
                },
            );
            state.session.send(id, Bytes::from(request));
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

    /// A TCP connection to `addr` from the bind address, within the dial timeout.
    async fn connect(&self, addr: SocketAddr) -> Result<monoio::net::TcpStream, String> {
        let source = crate::shard::dial::source_for(self.bind_addr, addr);
        let stream =
            match monoio::time::timeout(CONNECT_TIMEOUT, crate::shard::dial::connect(source, addr))
                .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Err(format!("cannot connect to {addr}: {e}")),
                Err(_) => return Err(format!("timed out connecting to {addr}")),
            };
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// A new client session's state and the receiving end of its doorbell.
    fn new_connection(&self) -> (Rc<RefCell<Connection>>, flume::Receiver<()>) {
        let (doorbell, rings) = flume::bounded::<()>(1);
        let connection = Rc::new(RefCell::new(Connection {
            session: Session::new(Role::Client, self.now_ms()),
            calls: HashMap::default(),
            idle: Vec::new(),
            next_seq: 0,
            closed: None,
            doorbell,
        }));
        (connection, rings)
    }

    async fn dial(
        &self,
        addr: SocketAddr,
        datacenter: Option<&str>,
    ) -> Result<Rc<RefCell<Connection>>, String> {
        let mut stream = self.connect(addr).await?;
        let tls = match datacenter {
            None => self.tls.rpc_client(),
            Some(datacenter) => self.tls.rpc_client_for(datacenter)?,
        };
        let (connection, rings) = self.new_connection();
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
            let pending = state.calls.remove(&self.id).expect("looked up above");
            // A server's answer, error text or not, leaves the stream clean for reuse.
            let answered = matches!(result, Ok(_) | Err(CallError::Remote(_)));
            state.retire(self.id, &pending, answered);
            return Poll::Ready(result);
        }
        pending.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for AnswerFuture {
    fn drop(&mut self) {
        let mut state = self.connection.borrow_mut();
        if let Some(pending) = state.calls.remove(&self.id) {
            // Unanswered (a timeout): the server may drop the call's work, and the stream
            // cannot carry another call while this one's answer may still come.
            state.retire(self.id, &pending, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::msgpack_rpc::encode_response;

    fn connection() -> Connection {
        // Nobody listens to the doorbell: the test moves the bytes itself.
        let (doorbell, _) = flume::bounded(1);
        Connection {
            session: Session::new(Role::Client, 0),
            calls: HashMap::default(),
            idle: Vec::new(),
            next_seq: 0,
            closed: None,
            doorbell,
        }
    }

    /// Starts a call on the connection's next stream, as `RpcClient::call` does.
    fn start(client: &mut Connection) -> u32 {
        let id = client.stream().unwrap();
        client.next_seq += 1;
        let mut request = Vec::new();
        encode_request(&mut request, "KVS.Get", client.next_seq, &[0x80]);
        client.calls.insert(
            id,
            Pending {
                answer: MessageAssembler::default(),
                result: None,
                waker: None,
            },
        );
        client.session.send(id, Bytes::from(request));
        id
    }

    /// Carries the client's bytes to the server session and the server's `reply` (raw
    /// bytes on stream `id`) back, feeding the client's events to its connection.
    fn exchange(client: &mut Connection, server: &mut Session, id: u32, reply: &[u8]) {
        let mut wire = client.session.take_outbox();
        let mut events = Vec::new();
        server.receive(&mut wire, &mut events).unwrap();
        for event in events.drain(..) {
            if let Event::Data(stream, bytes) = event {
                server.consumed(stream, bytes.len());
            }
        }
        server.send(id, Bytes::copy_from_slice(reply));
        let mut wire = server.take_outbox();
        client.session.receive(&mut wire, &mut events).unwrap();
        for event in events.drain(..) {
            client.on_event(event);
        }
    }

    fn answer_bytes(seq: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_response(&mut out, "KVS.Get", seq, "", &[0xc3]);
        out
    }

    /// Ends the call as `AnswerFuture` does once its answer is there.
    fn finish(client: &mut Connection, id: u32) -> Result<Bytes, CallError> {
        let mut pending = client.calls.remove(&id).expect("a call in flight");
        let result = pending.result.take().expect("answered");
        let answered = matches!(result, Ok(_) | Err(CallError::Remote(_)));
        client.retire(id, &pending, answered);
        result
    }

    #[test]
    fn an_answered_stream_carries_the_next_call() {
        let mut client = connection();
        let mut server = Session::new(Role::Server, 0);
        let first = start(&mut client);
        exchange(&mut client, &mut server, first, &answer_bytes(1));
        assert_eq!(&finish(&mut client, first).unwrap()[..], &[0xc3]);
        assert_eq!(client.idle, vec![first]);
        let second = start(&mut client);
        assert_eq!(second, first, "the idle stream is reused");
        exchange(&mut client, &mut server, second, &answer_bytes(2));
        assert_eq!(&finish(&mut client, second).unwrap()[..], &[0xc3]);
        assert_eq!(server.stream_count(), 1, "one stream for both calls");
    }

    #[test]
    fn a_stream_with_bytes_beyond_its_answer_is_reset() {
        let mut client = connection();
        let mut server = Session::new(Role::Server, 0);
        let id = start(&mut client);
        let mut reply = answer_bytes(1);
        reply.extend_from_slice(&[0x81]);
        exchange(&mut client, &mut server, id, &reply);
        assert!(
            finish(&mut client, id).is_ok(),
            "the answer itself is whole"
        );
        assert!(client.idle.is_empty());
        assert!(!client.session.is_open(id), "reset, never reused");
        assert_ne!(start(&mut client), id);
    }

    #[test]
    fn idle_streams_beyond_the_bound_are_closed() {
        let mut client = connection();
        let mut server = Session::new(Role::Server, 0);
        let ids: Vec<u32> = (0..=IDLE_STREAMS_MAX).map(|_| start(&mut client)).collect();
        for (n, &id) in ids.iter().enumerate() {
            exchange(&mut client, &mut server, id, &answer_bytes(n as u64 + 1));
        }
        for &id in &ids {
            finish(&mut client, id).unwrap();
        }
        assert_eq!(client.idle.len(), IDLE_STREAMS_MAX);
        let last = *ids.last().unwrap();
        assert!(!client.idle.contains(&last));
        // Half-closed here; the server closes its side in turn and the stream is forgotten.
        let mut wire = client.session.take_outbox();
        let mut events = Vec::new();
        server.receive(&mut wire, &mut events).unwrap();
        assert!(events.contains(&Event::Closed(last)));
    }
}
