//! Calls to other servers over multiplexed RPC connections (first byte [`PROTOCOL_RPC`]).
//!
//! Each shard keeps at most one connection per destination. Many requests share it, told
//! apart by request id: a writer task batches outgoing frames into one write, a reader task
//! hands each response to the request waiting for its id. A dead connection fails every
//! request waiting on it and is replaced on the next call.
//!
//! With `verify_outgoing` (or auto-encrypt) the connection is TLS: the TLS byte, a handshake
//! with the RPC client configuration in force at that moment, then the protocol byte inside
//! the session, as Consul dials.
//!
//! Bounds: `IN_FLIGHT_MAX` requests per connection, a timeout per call, connect timeout,
//! handshake timeout.

use crate::proto::rpc::{decode_frame, encode_frame, Frame, PROTOCOL_RPC};
use crate::proto::rpc_select::rpc_type;
use crate::tls::stream::HANDSHAKE_TIMEOUT_DEFAULT;
use crate::tls::{Protocol, TlsConfigurator};
use bytes::{Bytes, BytesMut};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt, Splitable};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Requests waiting on one connection at most.
pub const IN_FLIGHT_MAX: usize = 16_384;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const READ_CHUNK_BYTES: usize = 64 * 1024;

struct PendingReply {
    result: Option<Result<Frame, String>>,
    waker: Option<Waker>,
}

struct MuxConnection {
    outgoing: flume::Sender<Bytes>,
    pending: RefCell<HashMap<u64, PendingReply, ahash::RandomState>>,
    next_id: Cell<u64>,
    closed: Cell<bool>,
}

impl MuxConnection {
    fn fail_all(&self, reason: &str) {
        self.closed.set(true);
        for (_, slot) in self.pending.borrow_mut().iter_mut() {
            if slot.result.is_none() {
                slot.result = Some(Err(reason.to_string()));
                if let Some(waker) = slot.waker.take() {
                    waker.wake();
                }
            }
        }
    }
}

/// Why a call failed, and whether its request may have reached the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallFailure {
    pub reason: String,
    /// False only when the request certainly never left this process (no connection, or
    /// the connection was refused before the request was queued): sending it again elsewhere
    /// cannot apply it twice.
    pub sent: bool,
}

pub struct ForwardPool {
    connections: RefCell<HashMap<SocketAddr, Rc<MuxConnection>>>,
    /// Says whether and how to dial with TLS.
    tls: Arc<TlsConfigurator>,
    /// The agent's bind address, which connections leave from when it names one
    /// (`shard::dial`).
    bind_addr: IpAddr,
}

impl ForwardPool {
    pub fn new(tls: Arc<TlsConfigurator>, bind_addr: IpAddr) -> ForwardPool {
        ForwardPool {
            connections: RefCell::default(),
            tls,
            bind_addr,
        }
    }

    /// Sends one request frame to `addr` and waits for its response frame.
    pub async fn call(
        &self,
        addr: SocketAddr,
        kind: u8,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Frame, String> {
        self.call_checked(addr, kind, payload, timeout)
            .await
            .map_err(|failure| failure.reason)
    }

    /// [`ForwardPool::call`], telling a failure before sending from one after.
    pub async fn call_checked(
        &self,
        addr: SocketAddr,
        kind: u8,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Frame, CallFailure> {
        self.call_checked_in(None, addr, kind, payload, timeout)
            .await
    }

    /// [`ForwardPool::call_checked`] to a server of `datacenter` (`None`: this agent's own),
    /// whose name a new TLS connection asks for. A connection, once open, is kept per
    /// address: an address belongs to one server, and a server to one datacenter.
    pub async fn call_checked_in(
        &self,
        datacenter: Option<&str>,
        addr: SocketAddr,
        kind: u8,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Frame, CallFailure> {
        let not_sent = |reason: String| CallFailure {
            reason,
            sent: false,
        };
        let connection = self.connection(addr, datacenter).await.map_err(not_sent)?;
        if connection.pending.borrow().len() >= IN_FLIGHT_MAX {
            return Err(not_sent(format!("too many requests in flight to {addr}")));
        }
        let request_id = connection.next_id.get();
        connection.next_id.set(request_id + 1);
        let mut frame = BytesMut::with_capacity(payload.len() + 16);
        encode_frame(&mut frame, kind, request_id, payload);
        connection.pending.borrow_mut().insert(
            request_id,
            PendingReply {
                result: None,
                waker: None,
            },
        );
        let wait = ReplyFuture {
            connection: connection.clone(),
            request_id,
        };
        if connection
            .outgoing
            .send_async(frame.freeze())
            .await
            .is_err()
        {
            return Err(not_sent(format!("connection to {addr} closed")));
        }
        let sent = |reason: String| CallFailure { reason, sent: true };
        match monoio::time::timeout(timeout, wait).await {
            Ok(result) => result.map_err(sent),
            Err(_) => Err(sent(format!(
                "timed out after {timeout:?} waiting for {addr}"
            ))),
        }
    }

    async fn connection(
        &self,
        addr: SocketAddr,
        datacenter: Option<&str>,
    ) -> Result<Rc<MuxConnection>, String> {
        if let Some(existing) = self.connections.borrow().get(&addr) {
            if !existing.closed.get() {
                return Ok(existing.clone());
            }
        }
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
        let (tx, rx) = flume::bounded::<Bytes>(IN_FLIGHT_MAX);
        let connection = Rc::new(MuxConnection {
            outgoing: tx,
            pending: RefCell::new(HashMap::default()),
            next_id: Cell::new(1),
            closed: Cell::new(false),
        });
        let tls = match datacenter {
            None => self.tls.rpc_client(),
            Some(datacenter) => self.tls.rpc_client_for(datacenter)?,
        };
        match tls {
            None => {
                let (reader, writer) = stream.into_split();
                monoio::spawn(write_loop(connection.clone(), writer, rx));
                monoio::spawn(read_loop(connection.clone(), reader, addr));
            }
            Some((config, server_name)) => {
                let session = dial_tls(stream, config, server_name, addr).await?;
                let (reader, writer) = session.into_split();
                monoio::spawn(write_loop(connection.clone(), writer, rx));
                monoio::spawn(read_loop(connection.clone(), reader, addr));
            }
        }
        // The protocol byte goes first, ahead of any frame.
        let _ = connection
            .outgoing
            .send_async(Bytes::from_static(&[PROTOCOL_RPC]))
            .await;
        self.connections
            .borrow_mut()
            .insert(addr, connection.clone());
        Ok(connection)
    }
}

async fn write_loop(
    connection: Rc<MuxConnection>,
    mut writer: impl monoio::io::AsyncWriteRent,
    frames: flume::Receiver<Bytes>,
) {
    let mut batch = Vec::with_capacity(64 * 1024);
    while let Ok(first) = frames.recv_async().await {
        batch.clear();
        batch.extend_from_slice(&first);
        while batch.len() < 1 << 20 {
            match frames.try_recv() {
                Ok(frame) => batch.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        let (result, returned) = writer.write_all(std::mem::take(&mut batch)).await;
        batch = returned;
        if result.is_err() {
            connection.fail_all("connection to server lost while sending");
            return;
        }
        if connection.closed.get() {
            return;
        }
    }
}

async fn read_loop(
    connection: Rc<MuxConnection>,
    mut reader: impl AsyncReadRent,
    addr: SocketAddr,
) {
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    loop {
        loop {
            match decode_frame(&mut buf) {
                Ok(Some(frame)) => {
                    let mut pending = connection.pending.borrow_mut();
                    if let Some(slot) = pending.get_mut(&frame.request_id) {
                        slot.result = Some(Ok(frame));
                        if let Some(waker) = slot.waker.take() {
                            waker.wake();
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    connection.fail_all(&format!("bad frame from {addr}: {e}"));
                    return;
                }
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK_BYTES / 4 {
            buf.reserve(READ_CHUNK_BYTES);
        }
        let len = buf.len();
        let (result, slice) = reader.read(buf.slice_mut(len..)).await;
        buf = slice.into_inner();
        match result {
            Ok(0) => {
                connection.fail_all(&format!("connection to {addr} lost"));
                return;
            }
            Err(error) => {
                let reason = crate::tls::stream::describe_io_error(&error);
                // Under TLS 1.3 a server that refuses our certificate says so after our side
                // of the handshake finished, on the first read: that is worth a line.
                if error
                    .get_ref()
                    .is_some_and(|inner| inner.is::<rustls::Error>())
                {
                    log::warn!("tls: internal_rpc connection to {addr} ended: {reason}");
                }
                connection.fail_all(&format!("connection to {addr} lost: {reason}"));
                return;
            }
            Ok(_) => {}
        }
    }
}

struct ReplyFuture {
    connection: Rc<MuxConnection>,
    request_id: u64,
}

impl Future for ReplyFuture {
    type Output = Result<Frame, String>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut pending = self.connection.pending.borrow_mut();
        let Some(slot) = pending.get_mut(&self.request_id) else {
            return Poll::Ready(Err("request abandoned".to_string()));
        };
        if let Some(result) = slot.result.take() {
            pending.remove(&self.request_id);
            return Poll::Ready(result);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for ReplyFuture {
    fn drop(&mut self) {
        self.connection
            .pending
            .borrow_mut()
            .remove(&self.request_id);
    }
}

/// Opens TLS on a fresh connection to a server's port as Consul's pool does: the TLS byte
/// (3), then the handshake; a failed handshake is logged as one readable line, which is
/// also the error. The caller then writes the inner byte.
pub(crate) async fn dial_tls(
    mut stream: monoio::net::TcpStream,
    config: Arc<rustls::ClientConfig>,
    server_name: rustls::pki_types::ServerName<'static>,
    addr: SocketAddr,
) -> Result<crate::tls::stream::ClientTlsStream<monoio::net::TcpStream>, String> {
    let (written, _) = stream.write_all(vec![rpc_type::TLS]).await;
    written.map_err(|e| format!("cannot write to {addr}: {e}"))?;
    dial_native_tls(stream, config, server_name, addr).await
}

/// Opens native TLS on a fresh connection (no type byte: the ClientHello comes first, and
/// the ALPN protocol in `config` says what follows), as a server dials another datacenter
/// through a mesh gateway; a failed handshake is logged as one readable line, which is
/// also the error.
pub(crate) async fn dial_native_tls(
    stream: monoio::net::TcpStream,
    config: Arc<rustls::ClientConfig>,
    server_name: rustls::pki_types::ServerName<'static>,
    addr: SocketAddr,
) -> Result<crate::tls::stream::ClientTlsStream<monoio::net::TcpStream>, String> {
    crate::tls::stream::connect(config, server_name, stream, HANDSHAKE_TIMEOUT_DEFAULT)
        .await
        .map_err(|error| {
            let line = crate::tls::handshake_failure_line(Protocol::InternalRpc, addr, &error);
            log::warn!("{line}");
            line
        })
}
