//! The server RPC listener (:8300) of a shard. The first byte of a connection selects the
//! protocol, as in Consul:
//!
//! - [`PROTOCOL_RAFT`]: a peer's stream of Raft messages; the socket itself is handed to the
//!   raft core thread, which reads and decodes it (one thread wake-up less per message).
//! - [`PROTOCOL_RPC`]: multiplexed requests — each runs as its own task, answers go back
//!   through the connection's single writer task, tagged with the request id.
//!
//! Bounds: `RPC_IN_FLIGHT_MAX` concurrent requests per connection (more get an error frame),
//! frame size ([`FRAME_BYTES_MAX`](crate::proto::rpc::FRAME_BYTES_MAX)), a timeout for the
//! first byte.

use crate::proto::rpc::{decode_frame, encode_frame, kind, PROTOCOL_RAFT, PROTOCOL_RPC};
use crate::shard::runtime::{RaftInput, Shard};
use bytes::{Bytes, BytesMut};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt, Splitable};
use monoio::net::{TcpListener, TcpStream};
use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::time::Duration;

/// Concurrent requests served per RPC connection.
pub const RPC_IN_FLIGHT_MAX: usize = 16_384;
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// What answers the HTTP requests other servers forward here ([`kind::FORWARD_HTTP`]). The
/// HTTP layer sits above the runtime, so whoever starts the shard hands it in; the runtime
/// only carries the bytes.
pub trait ForwardedHttp: 'static {
    /// The raw HTTP/1.1 response to a raw HTTP/1.1 request.
    fn answer(&self, request: Bytes) -> impl Future<Output = Vec<u8>>;
}

pub async fn accept_loop<H: ForwardedHttp>(shard: Rc<Shard>, http: Rc<H>, listener: TcpListener) {
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

async fn serve<H: ForwardedHttp>(
    shard: Rc<Shard>,
    http: Rc<H>,
    mut stream: TcpStream,
    peer: SocketAddr,
) {
    let first = vec![0u8; 1];
    let (result, first) = match monoio::time::timeout(FIRST_BYTE_TIMEOUT, stream.read(first)).await
    {
        Ok(read) => read,
        Err(_) => return,
    };
    if !matches!(result, Ok(1)) {
        return;
    }
    match first[0] {
        PROTOCOL_RAFT => raft_stream(&shard, stream, peer).await,
        PROTOCOL_RPC => rpc_stream(shard, http, stream, peer).await,
        other => log::debug!("rpc: unknown protocol byte {other:#04x} from {peer}; closing"),
    }
}

/// Reads frames until the stream ends; calls `each` for every frame.
async fn read_frames(
    stream: &mut impl AsyncReadRent,
    peer: SocketAddr,
    mut each: impl AsyncFnMut(crate::proto::rpc::Frame) -> bool,
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
        .send_async(RaftInput::PeerStream { socket, peer })
        .await;
}

async fn rpc_stream<H: ForwardedHttp>(
    shard: Rc<Shard>,
    http: Rc<H>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let (mut reader, mut writer) = stream.into_split();
    let (tx, rx) = flume::bounded::<Bytes>(RPC_IN_FLIGHT_MAX);
    monoio::spawn(async move {
        let mut batch = Vec::with_capacity(64 * 1024);
        while let Ok(first) = rx.recv_async().await {
            batch.clear();
            batch.extend_from_slice(&first);
            while batch.len() < 1 << 20 {
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
            let mut out = BytesMut::new();
            match frame.kind {
                kind::FORWARD_HTTP => {
                    let answer = http.answer(frame.payload).await;
                    encode_frame(
                        &mut out,
                        kind::FORWARD_HTTP_RESPONSE,
                        frame.request_id,
                        &answer,
                    );
                }
                kind::PING => encode_frame(&mut out, kind::PONG, frame.request_id, b""),
                other => encode_frame(
                    &mut out,
                    kind::ERROR,
                    frame.request_id,
                    format!("unknown request kind {other}").as_bytes(),
                ),
            }
            in_flight.set(in_flight.get() - 1);
            let _ = tx.send_async(out.freeze()).await;
        });
        true
    })
    .await;
}
