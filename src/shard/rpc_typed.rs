//! Consul's typed calls on the server port: one msgpack net/rpc codec on the connection
//! (byte 0) or a yamux session whose every stream is one (byte 4), plain or inside TLS.
//!
//! The runtime only carries the calls: what serves a `KVS.Get` sits above it (the HTTP
//! layer's typed endpoints) and is handed in by `node` as [`TypedCalls`]. Here:
//! - a codec serves its calls one at a time, in order, as Go's `rpc.ServeRequest` loop in
//!   Consul's `handleConsulConn` does; a client that wants calls in parallel opens streams;
//! - a yamux session reads frames on one task, writes its outbox on another, and serves each
//!   stream's calls on a task per call in flight (at most one per stream, so at most
//!   [`yamux::STREAMS_MAX`](crate::proto::yamux::STREAMS_MAX) per connection);
//! - a call's body reaches [`TypedCalls::serve`] as a slice of the receive buffer: whole
//!   calls inside one yamux frame, or in one read of a plain codec, are never copied.
//!
//! Bad bytes end what they arrived on, never the process: a header that is not Go's
//! `rpc.Request`, or a call beyond the codec's limits, closes a plain codec's connection or
//! resets its yamux stream; a yamux protocol error ends the session with GoAway. A stream
//! holds at most one call's unread bytes beyond the one being served: its receive window is
//! not reopened while a call runs, so the client waits instead of buffering here.

use crate::proto::msgpack_rpc::{
    decode_request_header, encode_response, MessageAssembler, MessageReader,
};
use crate::proto::yamux::{Event, Role, Session};
use crate::shard::runtime::Shard;
use crate::telemetry::{self, Counter};
use bytes::{Bytes, BytesMut};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

/// Bytes asked of the socket per read.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// How often a yamux session's keepalive is looked at; pings go out at yamux's interval.
const KEEPALIVE_TICK: Duration = Duration::from_secs(5);

/// One typed call as it arrived: Consul's `Service.Method` and the msgpack body, both
/// slices of the receive buffer (cloning shares them).
#[derive(Clone, Debug)]
pub struct TypedCall {
    method: Bytes,
    pub seq: u64,
    pub body: Bytes,
    pub peer: SocketAddr,
    /// How many praetor servers handed the call on before this one (0 from a client).
    pub hops: u8,
}

impl TypedCall {
    pub fn new(method: Bytes, seq: u64, body: Bytes, peer: SocketAddr) -> TypedCall {
        debug_assert!(
            std::str::from_utf8(&method).is_ok(),
            "a checked method name"
        );
        TypedCall {
            method,
            seq,
            body,
            peer,
            hops: 0,
        }
    }

    /// The call as a server handed it on, `hops` servers away from its client.
    pub fn forwarded(mut self, hops: u8) -> TypedCall {
        self.hops = hops;
        self
    }

    /// The call as net/rpc writes it (header, then body), to hand it on.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + self.method.len() + 32);
        crate::proto::msgpack_rpc::encode_request(&mut out, self.method(), self.seq, &self.body);
        out
    }

    /// Reads a call handed on by another server: the hop count, then the call.
    pub fn decode_forwarded(payload: Bytes, peer: SocketAddr) -> Result<TypedCall, String> {
        let Some(&hops) = payload.first() else {
            return Err("empty forwarded call".to_string());
        };
        let message = payload.slice(1..);
        let extent = MessageReader::new()
            .advance(&message)
            .map_err(|e| e.to_string())?
            .filter(|extent| extent.total() == message.len())
            .ok_or_else(|| "a forwarded call is not one whole call".to_string())?;
        let header =
            decode_request_header(&message[..extent.header_length]).map_err(|e| e.to_string())?;
        Ok(TypedCall::new(
            message.slice_ref(header.method.as_bytes()),
            header.seq,
            message.slice(extent.header_length..),
            peer,
        )
        .forwarded(hops))
    }

    /// `Service.Method`, e.g. `KVS.Get`.
    pub fn method(&self) -> &str {
        // Checked when the header was decoded; a failure here serves no method.
        std::str::from_utf8(&self.method).unwrap_or("")
    }
}

/// A call's answer: net/rpc's error text (empty on success) and the reply's msgpack body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedAnswer {
    pub error: String,
    pub body: Vec<u8>,
}

impl TypedAnswer {
    pub fn ok(body: Vec<u8>) -> TypedAnswer {
        TypedAnswer {
            error: String::new(),
            body,
        }
    }

    pub fn error(error: impl Into<String>) -> TypedAnswer {
        let error = error.into();
        debug_assert!(!error.is_empty(), "an error says what went wrong");
        TypedAnswer {
            error,
            body: Vec::new(),
        }
    }
}

/// What serves Consul's typed calls. The runtime sits below the layer that knows the
/// endpoints, so whoever starts the shard hands it in.
pub trait TypedCalls: 'static {
    fn serve(&self, call: TypedCall) -> impl Future<Output = TypedAnswer>;

    /// Serves a byte-5 (`RPCSnapshot`) connection to its end. By default the connection
    /// is closed unanswered: a table without snapshots (the insecure session's) serves none.
    fn serve_snapshot(
        &self,
        stream: crate::shard::snapshot_stream::SnapshotStream,
        peer: SocketAddr,
    ) -> impl Future<Output = ()> {
        log::warn!("rpc: refused a snapshot connection from {peer}: not served here");
        drop(stream);
        async {}
    }
}

/// Serves one call and encodes its answer as net/rpc writes it.
pub async fn answer<C: TypedCalls>(calls: &C, call: TypedCall) -> Vec<u8> {
    telemetry::incr(Counter::RpcRequest);
    let method = call.method.clone();
    let seq = call.seq;
    let answer = calls.serve(call).await;
    if !answer.error.is_empty() {
        telemetry::incr(Counter::RpcRequestError);
    }
    let mut out = Vec::with_capacity(answer.body.len() + 64);
    let method = std::str::from_utf8(&method).unwrap_or("");
    encode_response(&mut out, method, seq, &answer.error, &answer.body);
    out
}

/// The complete calls at the front of `buffer`, each with its header decoded; stops at the
/// first incomplete one. `Err` when the bytes are not net/rpc calls.
fn take_calls(
    buffer: &mut BytesMut,
    reader: &mut MessageReader,
    peer: SocketAddr,
    calls: &mut Vec<TypedCall>,
) -> Result<(), String> {
    while let Some(extent) = reader.advance(buffer).map_err(|e| e.to_string())? {
        let message = buffer.split_to(extent.total()).freeze();
        let header =
            decode_request_header(&message[..extent.header_length]).map_err(|e| e.to_string())?;
        let method = message.slice_ref(header.method.as_bytes());
        let body = message.slice(extent.header_length..);
        calls.push(TypedCall::new(method, header.seq, body, peer));
    }
    Ok(())
}

/// One msgpack net/rpc codec on a connection (byte 0): calls served one at a time, in
/// order, until the client hangs up or sends what is not a call.
pub async fn serve_codec<C: TypedCalls>(
    shard: Rc<Shard>,
    calls: Rc<C>,
    mut reader: impl AsyncReadRent,
    mut writer: impl AsyncWriteRent,
    peer: SocketAddr,
) {
    log::debug!("rpc: msgpack codec from {peer}");
    let mut buffer = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut scanner = MessageReader::new();
    let mut ready = Vec::new();
    loop {
        if let Err(why) = take_calls(&mut buffer, &mut scanner, peer, &mut ready) {
            log::warn!("rpc: bad call from {peer}: {why}; closing");
            return;
        }
        for call in ready.drain(..) {
            if shard.shared().faults.is_blocked(peer.ip()) {
                continue;
            }
            let out = answer(&*calls, call).await;
            let (result, _) = writer.write_all(out).await;
            if result.is_err() {
                return;
            }
        }
        if buffer.capacity() - buffer.len() < READ_CHUNK_BYTES / 4 {
            buffer.reserve(READ_CHUNK_BYTES);
        }
        let length = buffer.len();
        let (result, slice) = reader.read(buffer.slice_mut(length..)).await;
        buffer = slice.into_inner();
        match result {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// One yamux stream's codec.
#[derive(Default)]
struct StreamCodec {
    /// The stream's calls as they arrive; a call inside one frame is served from the
    /// frame's own bytes.
    calls: MessageAssembler,
    /// A call of this stream is being served.
    busy: bool,
    /// Bytes received while busy, whose window is reopened once the call ends.
    held_back: usize,
    /// The client sent FIN: once its calls are answered, the stream is closed here too.
    finished: bool,
}

/// A yamux session shared by its reader, its writer and its calls in flight (all on the
/// shard's thread).
struct Mux {
    session: Session,
    streams: HashMap<u32, StreamCodec, ahash::RandomState>,
    /// Rings the writer: the outbox has bytes.
    doorbell: flume::Sender<()>,
    /// The session is over; tasks still running drop their answers.
    over: bool,
}

impl Mux {
    fn ring(&self) {
        if self.session.has_output() {
            let _ = self.doorbell.try_send(());
        }
    }
}

/// A yamux session (byte 4): frames read here, written by a writer task, each stream's
/// calls served in order.
pub async fn serve_yamux<C: TypedCalls>(
    shard: Rc<Shard>,
    calls: Rc<C>,
    mut reader: impl AsyncReadRent,
    writer: impl AsyncWriteRent + 'static,
    peer: SocketAddr,
) {
    log::debug!("rpc: yamux session from {peer}");
    let (doorbell, rings) = flume::bounded::<()>(1);
    let mux = Rc::new(RefCell::new(Mux {
        session: Session::new(Role::Server, shard.shared().now_ms()),
        streams: HashMap::default(),
        doorbell,
        over: false,
    }));
    monoio::spawn(write_outbox(mux.clone(), rings, writer));
    monoio::spawn(keep_alive(shard.clone(), mux.clone(), peer));
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut events = Vec::new();
    loop {
        if input.capacity() - input.len() < READ_CHUNK_BYTES / 4 {
            input.reserve(READ_CHUNK_BYTES);
        }
        let length = input.len();
        let (result, slice) = reader.read(input.slice_mut(length..)).await;
        input = slice.into_inner();
        // The writer gave up (a client that stopped reading) or the keepalive failed:
        // nothing read now could be answered.
        if !matches!(result, Ok(n) if n > 0) || mux.borrow().over {
            if let Err(error) = result {
                log::debug!("rpc: yamux session with {peer} ended reading: {error}");
            }
            break;
        }
        let received = mux.borrow_mut().session.receive(&mut input, &mut events);
        for event in events.drain(..) {
            on_event(&shard, &calls, &mux, peer, event);
        }
        mux.borrow().ring();
        if let Err(error) = received {
            log::warn!("rpc: yamux session with {peer} ended: {error}");
            break;
        }
    }
    let mut mux = mux.borrow_mut();
    mux.over = true;
    mux.streams.clear();
    // The writer sends what is left (a GoAway) and stops once the doorbell is dropped.
    let _ = mux.doorbell.try_send(());
}

fn on_event<C: TypedCalls>(
    shard: &Rc<Shard>,
    calls: &Rc<C>,
    mux: &Rc<RefCell<Mux>>,
    peer: SocketAddr,
    event: Event,
) {
    let mut state = mux.borrow_mut();
    match event {
        Event::Opened(id) => {
            state.streams.insert(id, StreamCodec::default());
        }
        Event::Data(id, bytes) => {
            let Mux {
                session, streams, ..
            } = &mut *state;
            let Some(codec) = streams.get_mut(&id) else {
                return;
            };
            let length = bytes.len();
            codec.calls.push(bytes);
            if codec.busy {
                codec.held_back += length;
            } else {
                session.consumed(id, length);
            }
            drop(state);
            dispatch(shard, calls, mux, peer, id);
        }
        Event::Closed(id) => {
            let Some(codec) = state.streams.get_mut(&id) else {
                return;
            };
            codec.finished = true;
            if !codec.busy {
                finish(&mut state, id);
            }
        }
        Event::Reset(id) => {
            state.streams.remove(&id);
        }
        Event::Established(_) | Event::GoAway => {}
    }
}

/// Closes a stream the client finished once its last call is answered.
fn finish(state: &mut Mux, id: u32) {
    if state
        .streams
        .get(&id)
        .is_some_and(|c| c.finished && !c.busy)
    {
        state.streams.remove(&id);
        state.session.close(id);
    }
}

/// Serves the stream's next complete call, if it has one and none is running.
fn dispatch<C: TypedCalls>(
    shard: &Rc<Shard>,
    calls: &Rc<C>,
    mux: &Rc<RefCell<Mux>>,
    peer: SocketAddr,
    id: u32,
) {
    let mut state = mux.borrow_mut();
    let Some(codec) = state.streams.get_mut(&id) else {
        return;
    };
    if codec.busy {
        return;
    }
    // One call at a time: the rest of the stream's bytes wait for it.
    let taken = codec.calls.next_message().and_then(|found| match found {
        None => Ok(None),
        Some((message, header_length)) => {
            decode_request_header(&message[..header_length]).map(|header| {
                Some(TypedCall::new(
                    message.slice_ref(header.method.as_bytes()),
                    header.seq,
                    message.slice(header_length..),
                    peer,
                ))
            })
        }
    });
    let call = match taken {
        Ok(Some(call)) => call,
        Ok(None) => {
            finish(&mut state, id);
            state.ring();
            return;
        }
        Err(why) => {
            log::warn!("rpc: bad call from {peer} on stream {id}: {why}; resetting it");
            state.streams.remove(&id);
            state.session.reset(id);
            state.ring();
            return;
        }
    };
    if shard.shared().faults.is_blocked(peer.ip()) {
        return;
    }
    codec.busy = true;
    drop(state);
    let (shard, calls, mux) = (shard.clone(), calls.clone(), mux.clone());
    monoio::spawn(async move {
        let out = answer(&*calls, call).await;
        {
            let mut state = mux.borrow_mut();
            if state.over {
                return;
            }
            let Mux {
                session, streams, ..
            } = &mut *state;
            let Some(codec) = streams.get_mut(&id) else {
                // Reset while the call ran: the answer has nowhere to go.
                return;
            };
            codec.busy = false;
            let held_back = std::mem::take(&mut codec.held_back);
            session.send(id, Bytes::from(out));
            session.consumed(id, held_back);
            state.ring();
        }
        dispatch(&shard, &calls, &mux, peer, id);
    });
}

/// Writes the session's outbox whenever it is rung, until the session is over.
async fn write_outbox(
    mux: Rc<RefCell<Mux>>,
    rings: flume::Receiver<()>,
    mut writer: impl AsyncWriteRent,
) {
    while rings.recv_async().await.is_ok() {
        let (out, over) = {
            let mut state = mux.borrow_mut();
            (state.session.take_outbox(), state.over)
        };
        if !out.is_empty() {
            let (result, _) = writer.write_all(out).await;
            if result.is_err() {
                mux.borrow_mut().over = true;
                return;
            }
        }
        if over {
            let _ = writer.shutdown().await;
            return;
        }
    }
}

/// Pings the client at yamux's interval; a session whose pings go unanswered ends.
async fn keep_alive(shard: Rc<Shard>, mux: Rc<RefCell<Mux>>, peer: SocketAddr) {
    loop {
        monoio::time::sleep(KEEPALIVE_TICK).await;
        let mut state = mux.borrow_mut();
        if state.over {
            return;
        }
        if let Err(error) = state.session.tick(shard.shared().now_ms()) {
            log::warn!("rpc: yamux session with {peer} ended: {error}");
            state.over = true;
            let _ = state.doorbell.try_send(());
            return;
        }
        state.ring();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::msgpack_rpc::encode_request;

    #[test]
    fn whole_calls_are_taken_and_the_rest_waits() {
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut wire = Vec::new();
        encode_request(&mut wire, "Status.Ping", 1, &[0xc0]);
        encode_request(
            &mut wire,
            "KVS.Get",
            2,
            &[0x81, 0xa3, b'K', b'e', b'y', 0xa1, b'a'],
        );
        let cut = wire.len() - 3;
        let mut buffer = BytesMut::from(&wire[..cut]);
        let mut scanner = MessageReader::new();
        let mut calls = Vec::new();
        take_calls(&mut buffer, &mut scanner, peer, &mut calls).unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].method(), calls[0].seq), ("Status.Ping", 1));
        assert_eq!(&calls[0].body[..], &[0xc0]);
        buffer.extend_from_slice(&wire[cut..]);
        take_calls(&mut buffer, &mut scanner, peer, &mut calls).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[1].method(), calls[1].seq), ("KVS.Get", 2));
        assert!(buffer.is_empty());
        let mut garbage = BytesMut::from(&[0x91u8, 0x01, 0xc0][..]);
        assert!(take_calls(&mut garbage, &mut MessageReader::new(), peer, &mut calls).is_err());
    }
}
