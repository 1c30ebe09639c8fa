//! The server RPC listener (:8300) of a shard. The first byte of a connection selects the
//! protocol, as in Consul:
//!
//! - [`PROTOCOL_RAFT`](crate::proto::rpc::PROTOCOL_RAFT): a peer's stream of Raft messages;
//!   the socket itself is handed to the raft core thread, which reads and decodes it (one
//!   thread wake-up less per message).
//! - Consul's RPC: one msgpack net/rpc codec (byte 0) or a yamux session of them (byte 4):
//!   typed calls (`KVS.Get`, `Catalog.Register`, …) carried by [`crate::shard::rpc_typed`] to
//!   the [`TypedCalls`] the HTTP layer serves.
//! - A snapshot's own connection (byte 5, `RPCSnapshot`): handed whole to
//!   [`TypedCalls::serve_snapshot`] as a [`SnapshotStream`], plain or inside TLS.
//! - [`PROTOCOL_RPC`](crate::proto::rpc::PROTOCOL_RPC): praetor's multiplexed request frames
//!   (on a byte Consul does not use): a typed call one server hands to another with its hop
//!   count, or a ping. Each runs as its own task, answers go back through the
//!   connection's single writer task, tagged with the request id.
//! - TLS ([`rpc_type::TLS`](crate::proto::rpc_select::rpc_type::TLS)): a TLS handshake (the
//!   client certificate required and verified under `verify_incoming`), then a second
//!   protocol byte inside the session selects Raft, typed calls or frames as above. A peer that asks for
//!   Raft must pass the server-role check
//!   ([`crate::tls::TlsConfigurator::authorize_server_peer`]): with `verify_incoming` and
//!   `verify_server_hostname`, its certificate must name `server.<datacenter>.<domain>`, so a
//!   node holding a client certificate never joins Raft. An accepted TLS Raft stream is
//!   decrypted here and relayed to the raft thread through a socket pair.
//!
//! - Insecure TLS ([`rpc_type::TLS_INSECURE`](crate::proto::rpc_select::rpc_type::TLS_INSECURE)),
//!   on servers with `auto_encrypt.allow_tls`: a handshake that asks for no client
//!   certificate, then one msgpack net/rpc codec at once (no second byte, as Consul's pool
//!   dials it) on which only `AutoEncrypt.Sign` is served ([`CertificateRequestOnly`]);
//!   any other method gets net/rpc's "can't find service" answer, as Consul's insecure
//!   RPC server, which registers only that endpoint, gives it.
//!
//! - Native TLS (a ClientHello as the first byte, as Consul's `handleNativeTLS`): the byte
//!   and the rest of the hello go to a TLS server that offers Consul's ALPN names and
//!   requires a verified client certificate; the negotiated protocol then selects typed
//!   calls (`consul/rpc-single`, `consul/rpc-multi`) or Raft (`consul/raft`, with the same
//!   server-role check) with no second byte. Mesh gateways route such connections to a
//!   server by SNI. WAN gossip from other datacenters (`consul/wan-gossip/packet|stream`)
//!   is relayed to this server's WAN pool ([`crate::shard::wanfed`]) when it federates
//!   through gateways. ALPN protocols praetor does not speak are refused by name.
//!
//! What a byte selects is decided in one place ([`crate::proto::rpc_select::select`]); with
//! `verify_incoming` a plaintext byte is refused and logged with the peer's address.
//!
//! Bounds: `RPC_IN_FLIGHT_MAX` concurrent requests per connection (more get an error frame),
//! frame size ([`FRAME_BYTES_MAX`](crate::proto::rpc::FRAME_BYTES_MAX)), a timeout for the
//! first byte (each of them, outside and inside TLS), the handshake timeout.

use crate::proto::rpc::{decode_frame, encode_frame, kind, Frame};
use crate::proto::rpc_select::{select, select_alpn, Layer, Selection};
use crate::shard::raft_inbox::PeerSocket;
use crate::shard::rpc_typed;
pub use crate::shard::rpc_typed::{TypedAnswer, TypedCall, TypedCalls};
use crate::shard::runtime::{RaftInput, Shard};
use crate::shard::snapshot_stream::SnapshotStream;
use crate::shard::wanfed;
use crate::telemetry::{self, Counter};
use crate::tls::stream::{FirstRecord, ServerTlsStream, HANDSHAKE_TIMEOUT_DEFAULT};
use crate::tls::Protocol;
use crate::tls::TlsConfigurator;
use bytes::{Bytes, BytesMut};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::{TcpListener, TcpStream};
use std::cell::Cell;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::time::Duration;

/// Concurrent requests served per RPC connection.
pub const RPC_IN_FLIGHT_MAX: usize = 16_384;
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
const READ_CHUNK_BYTES: usize = 64 * 1024;

pub async fn accept_loop<H: TypedCalls>(shard: Rc<Shard>, http: Rc<H>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                monoio::spawn(serve(shard.clone(), http.clone(), stream, peer));
            }
            Err(e) => {
                if shard.shutting_down() {
                    return;
                }
                log::warn!("rpc: accept failed: {e}");
                monoio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Reads one protocol byte, within [`FIRST_BYTE_TIMEOUT`]; `None` if none came.
async fn protocol_byte(stream: &mut impl AsyncReadRent) -> Option<u8> {
    let first = vec![0u8; 1];
    let (result, first) = monoio::time::timeout(FIRST_BYTE_TIMEOUT, stream.read(first))
        .await
        .ok()?;
    matches!(result, Ok(1)).then(|| first[0])
}

async fn serve<H: TypedCalls>(
    shard: Rc<Shard>,
    http: Rc<H>,
    mut stream: TcpStream,
    peer: SocketAddr,
) {
    let Some(byte) = protocol_byte(&mut stream).await else {
        return;
    };
    let policy = shard.shared().tls.listener_policy();
    match select(byte, Layer::Outer, &policy) {
        Ok(Selection::Raft) => raft_stream(&shard, stream, peer).await,
        Ok(Selection::ConsulRpc) => {
            let (reader, writer) = stream.into_split();
            rpc_typed::serve_codec(shard, http, reader, writer, peer).await
        }
        Ok(Selection::Multiplex) => {
            let (reader, writer) = stream.into_split();
            rpc_typed::serve_yamux(shard, http, reader, writer, peer).await
        }
        Ok(Selection::Snapshot) => {
            http.serve_snapshot(SnapshotStream::Plain(stream), peer)
                .await
        }
        Ok(Selection::PraetorFrames) => {
            let (reader, writer) = stream.into_split();
            rpc_stream(shard, http, reader, writer, peer).await
        }
        Ok(Selection::StartTls) => tls_session(shard, http, stream, peer).await,
        Ok(Selection::StartInsecureTls) => insecure_tls_session(shard, http, stream, peer).await,
        Ok(Selection::NativeTls) => native_tls_session(shard, http, stream, peer, byte).await,
        Ok(selected @ (Selection::WanGossipPacket | Selection::WanGossipStream)) => {
            debug_assert!(
                false,
                "{selected:?} is selected by ALPN only, never by a byte"
            );
        }
        Err(refusal) => log::warn!("rpc: refused a connection from {peer}: {refusal}"),
    }
}

/// A TLS session on the server port: handshake, then the protocol byte inside it.
async fn tls_session<H: TypedCalls>(
    shard: Rc<Shard>,
    http: Rc<H>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let tls = shard.shared().tls.clone();
    let Some(config) = tls.server_config(Protocol::InternalRpc) else {
        // `select` refuses TLS without a certificate; a reload cannot remove it (it fails).
        debug_assert!(false, "TLS selected without a certificate");
        return;
    };
    let Some(mut session) = handshake(config, stream, &[], peer).await else {
        return;
    };
    let Some(byte) = protocol_byte(&mut session).await else {
        return;
    };
    match select(byte, Layer::InsideTls, &tls.listener_policy()) {
        Ok(selection) => serve_inside_tls(shard, http, &tls, session, peer, selection).await,
        Err(refusal) => log::warn!("rpc: refused a TLS connection from {peer}: {refusal}"),
    }
}

/// Native TLS: `first` (the ClientHello's first byte, already read) and the rest of the
/// handshake go to rustls; the negotiated ALPN protocol selects what follows.
async fn native_tls_session<H: TypedCalls>(
    shard: Rc<Shard>,
    http: Rc<H>,
    stream: TcpStream,
    peer: SocketAddr,
    first: u8,
) {
    let tls = shard.shared().tls.clone();
    let Some(config) = tls.native_rpc_server_config() else {
        // `select` refuses a ClientHello unless the policy allows it, which needs this config.
        debug_assert!(false, "native TLS selected without its configuration");
        return;
    };
    let Some(session) = handshake(config, stream, &[first], peer).await else {
        return;
    };
    let (selected, sni) = session.with_connection(|connection| {
        (
            select_alpn(connection.alpn_protocol()),
            connection.server_name().map(str::to_string),
        )
    });
    let sni = sni.unwrap_or_default();
    match selected {
        Ok(selection) => {
            log::debug!("rpc: native TLS from {peer} (SNI {sni:?}) selected {selection:?}");
            serve_inside_tls(shard, http, &tls, session, peer, selection).await
        }
        Err(refusal) => {
            log::warn!("rpc: refused a native TLS connection from {peer} (SNI {sni:?}): {refusal}")
        }
    }
}

/// Serves what a protocol byte inside TLS, or a native TLS session's ALPN, selected.
async fn serve_inside_tls<H: TypedCalls>(
    shard: Rc<Shard>,
    http: Rc<H>,
    tls: &TlsConfigurator,
    session: ServerTlsStream<TcpStream>,
    peer: SocketAddr,
    selection: Selection,
) {
    match selection {
        Selection::Raft => {
            let chain = session.peer_certificates();
            if let Err(reason) = tls.authorize_server_peer(chain.as_deref()) {
                log::warn!("rpc: refused Raft from {peer}: {reason}");
                return;
            }
            relay_raft(&shard, session, peer).await
        }
        Selection::ConsulRpc => {
            let (reader, writer) = session.into_split();
            rpc_typed::serve_codec(shard, http, reader, writer, peer).await
        }
        Selection::Multiplex => {
            let (reader, writer) = session.into_split();
            rpc_typed::serve_yamux(shard, http, reader, writer, peer).await
        }
        Selection::Snapshot => {
            let stream = SnapshotStream::Accepted(Box::new(session));
            http.serve_snapshot(stream, peer).await
        }
        Selection::PraetorFrames => {
            let (reader, writer) = session.into_split();
            rpc_stream(shard, http, reader, writer, peer).await
        }
        Selection::WanGossipPacket | Selection::WanGossipStream => {
            let Some(pool) = shard.shared().wan_gossip_pool.get().copied() else {
                log::warn!(
                    "rpc: refused WAN gossip from {peer}: this server does not federate \
                     through mesh gateways (connect.enable_mesh_gateway_wan_federation)"
                );
                return;
            };
            if selection == Selection::WanGossipStream {
                return wanfed::relay_stream(session, pool, peer).await;
            }
            // The write half stays open while packets come: the sender reads nothing, but
            // a closed half would end its connection.
            let (reader, writer) = session.into_split();
            wanfed::relay_packets(reader, pool, peer).await;
            drop(writer);
        }
        other => {
            debug_assert!(false, "{other:?} selected inside TLS");
        }
    }
}

/// Auto-encrypt's first request: TLS without a client certificate, then one msgpack
/// net/rpc codec at once (no second byte), on which only `AutoEncrypt.Sign` is served.
async fn insecure_tls_session<H: TypedCalls>(
    shard: Rc<Shard>,
    http: Rc<H>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let Some(config) = shard.shared().tls.insecure_rpc_server_config() else {
        // `select` refuses byte 7 unless the policy allows it, which needs this config.
        debug_assert!(false, "insecure TLS selected without its configuration");
        return;
    };
    if let Some(session) = handshake(config, stream, &[], peer).await {
        let (reader, writer) = session.into_split();
        let calls = Rc::new(CertificateRequestOnly(http));
        rpc_typed::serve_codec(shard, calls, reader, writer, peer).await
    }
}

/// The calls of the insecure session: `AutoEncrypt.Sign` reaches the server's table, any
/// other method is answered as a server that knows only the `AutoEncrypt` service.
pub struct CertificateRequestOnly<C>(pub Rc<C>);

/// The one service the insecure session serves.
const CERTIFICATE_SERVICE: &str = "AutoEncrypt";

impl<C: TypedCalls> TypedCalls for CertificateRequestOnly<C> {
    async fn serve(&self, call: TypedCall) -> rpc_typed::TypedAnswer {
        if call.method() == "AutoEncrypt.Sign" {
            return self.0.serve(call).await;
        }
        rpc_typed::TypedAnswer::error(crate::proto::msgpack_rpc::unknown_method_error(
            call.method(),
            |service| service == CERTIFICATE_SERVICE,
        ))
    }
}

/// The server side of a TLS handshake on the server port, `read_already` being the bytes
/// the listener took before it chose TLS; a failure is logged as every TLS listener logs
/// it, and the connection dropped.
async fn handshake(
    config: std::sync::Arc<rustls::ServerConfig>,
    stream: TcpStream,
    read_already: &[u8],
    peer: SocketAddr,
) -> Option<ServerTlsStream<TcpStream>> {
    let accepted = crate::tls::stream::accept_after(
        config,
        stream,
        read_already,
        HANDSHAKE_TIMEOUT_DEFAULT,
        FirstRecord::Close,
    )
    .await;
    accepted
        .map_err(|error| {
            let line = crate::tls::handshake_failure_line(Protocol::InternalRpc, peer, &error);
            log::warn!("{line}");
        })
        .ok()
}

/// Bytes relayed per read of a peer's TLS Raft stream.
const RELAY_CHUNK_BYTES: usize = 64 * 1024;

/// Decrypts a peer's Raft stream and relays the plaintext to the raft thread through a socket
/// pair, which the thread reads as it reads a plain peer socket. Ends when either side ends.
async fn relay_raft(shard: &Shard, mut session: ServerTlsStream<TcpStream>, peer: SocketAddr) {
    let (ours, theirs) = match std::os::unix::net::UnixStream::pair() {
        Ok(pair) => pair,
        Err(e) => {
            log::warn!("rpc: cannot relay Raft from {peer}: {e}");
            return;
        }
    };
    let mut ours = match ours
        .set_nonblocking(true)
        .and_then(|()| monoio::net::UnixStream::from_std(ours))
    {
        Ok(ours) => ours,
        Err(e) => {
            log::warn!("rpc: cannot relay Raft from {peer}: {e}");
            return;
        }
    };
    let handed = shard
        .shared()
        .raft_inbox
        .send_async(RaftInput::PeerStream {
            socket: PeerSocket::Relayed(theirs),
            peer,
        })
        .await;
    if handed.is_err() {
        return;
    }
    let mut buffer = Vec::with_capacity(RELAY_CHUNK_BYTES);
    loop {
        buffer.clear();
        let (result, returned) = session.read(buffer).await;
        buffer = returned;
        match result {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let (result, returned) = ours.write_all(buffer).await;
        buffer = returned;
        if result.is_err() {
            // The raft thread closed its end (garbage, or too many streams).
            return;
        }
    }
}

/// Reads frames until the stream ends; calls `each` for every frame.
async fn read_frames(
    stream: &mut impl AsyncReadRent,
    peer: SocketAddr,
    mut each: impl AsyncFnMut(Frame) -> bool,
) {
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    loop {
        loop {
            match decode_frame(&mut buf) {
                Ok(Some(frame)) => {
                    if !each(frame).await {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    log::warn!("rpc: bad frame from {peer}: {e}; closing");
                    return;
                }
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK_BYTES / 4 {
            buf.reserve(READ_CHUNK_BYTES);
        }
        let len = buf.len();
        let (result, slice) = stream.read(buf.slice_mut(len..)).await;
        buf = slice.into_inner();
        match result {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Hands a peer's Raft stream to the raft thread, which reads it itself (see
/// [`crate::shard::raft_inbox`]). Nothing past the protocol byte has been read.
async fn raft_stream(shard: &Shard, stream: TcpStream, peer: SocketAddr) {
    // SAFETY: `into_raw_fd` gives up monoio's ownership of the descriptor (no operation is
    // in flight on it), so the std stream becomes its only owner.
    let socket = unsafe { std::net::TcpStream::from_raw_fd(stream.into_raw_fd()) };
    let _ = shard
        .shared()
        .raft_inbox
        .send_async(RaftInput::PeerStream {
            socket: PeerSocket::Tcp(socket),
            peer,
        })
        .await;
}

/// Serves multiplexed requests read from `reader`; answers leave through `writer` (the two
/// halves of a plain or a TLS connection).
async fn rpc_stream<H: TypedCalls>(
    shard: Rc<Shard>,
    http: Rc<H>,
    mut reader: impl AsyncReadRent,
    writer: impl AsyncWriteRent + 'static,
    peer: SocketAddr,
) {
    let tx = spawn_batching_writer(writer);
    let in_flight = Rc::new(Cell::new(0usize));
    read_frames(&mut reader, peer, async |frame| {
        if shard.shared().faults.is_blocked(peer.ip()) {
            return true;
        }
        let tx = tx.clone();
        if in_flight.get() >= RPC_IN_FLIGHT_MAX {
            let mut out = BytesMut::new();
            encode_frame(
                &mut out,
                kind::ERROR,
                frame.request_id,
                b"too many requests in flight on this connection",
            );
            return tx.send_async(out.freeze()).await.is_ok();
        }
        in_flight.set(in_flight.get() + 1);
        let http = http.clone();
        let in_flight = in_flight.clone();
        monoio::spawn(async move {
            let out = answer_frame(&*http, frame, peer).await;
            in_flight.set(in_flight.get() - 1);
            let _ = tx.send_async(out.freeze()).await;
        });
        true
    })
    .await;
}

/// Most bytes of answers gathered into one write: answers queued while a write is under way
/// leave together, up to this much.
const ANSWER_BATCH_BYTES_MAX: usize = 1 << 20;

/// Starts the task that writes a connection's answers in arrival order, batching those
/// that queue up; the sender it returns takes whole encoded frames (at most
/// [`RPC_IN_FLIGHT_MAX`] queued). The task ends when every sender is gone or a write fails.
fn spawn_batching_writer(mut writer: impl AsyncWriteRent + 'static) -> flume::Sender<Bytes> {
    let (tx, rx) = flume::bounded::<Bytes>(RPC_IN_FLIGHT_MAX);
    monoio::spawn(async move {
        let mut batch = Vec::with_capacity(64 * 1024);
        while let Ok(first) = rx.recv_async().await {
            batch.clear();
            batch.extend_from_slice(&first);
            while batch.len() < ANSWER_BATCH_BYTES_MAX {
                match rx.try_recv() {
                    Ok(frame) => batch.extend_from_slice(&frame),
                    Err(_) => break,
                }
            }
            let (result, returned) = writer.write_all(std::mem::take(&mut batch)).await;
            batch = returned;
            if result.is_err() {
                return;
            }
        }
    });
    tx
}

/// The encoded answer to one request frame; an unknown kind is an error frame, never a
/// dropped request.
async fn answer_frame<H: TypedCalls>(http: &H, frame: Frame, peer: SocketAddr) -> BytesMut {
    let mut out = BytesMut::new();
    match frame.kind {
        kind::TYPED_CALL => match TypedCall::decode_forwarded(frame.payload, peer) {
            Ok(call) => {
                let answer = rpc_typed::answer(http, call).await;
                encode_frame(&mut out, kind::TYPED_ANSWER, frame.request_id, &answer);
            }
            Err(why) => {
                telemetry::incr(Counter::RpcRequestError);
                encode_frame(&mut out, kind::ERROR, frame.request_id, why.as_bytes())
            }
        },
        kind::PING => encode_frame(&mut out, kind::PONG, frame.request_id, b""),
        other => {
            telemetry::incr(Counter::RpcRequestError);
            encode_frame(
                &mut out,
                kind::ERROR,
                frame.request_id,
                format!("unknown request kind {other}").as_bytes(),
            )
        }
    }
    out
}
