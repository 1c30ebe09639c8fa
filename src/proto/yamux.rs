//! yamux, the stream multiplexer Consul runs on the server port after byte 4
//! (`RPCMultiplexV2`), as `hashicorp/yamux`'s `spec.md` describes it: a pure session state
//! machine. It reads frames from a receive buffer and reports what happened as [`Event`]s;
//! what it has to say goes into an outbox the caller writes to the socket; time comes in as
//! an argument. No I/O, no clock, no threads.
//!
//! The wire: every frame starts with a 12-byte header — version (0), type (Data,
//! WindowUpdate, Ping, GoAway), flags (SYN, ACK, FIN, RST), stream ID, length — all big
//! endian; a Data frame's payload follows its header. Clients open odd stream IDs, servers
//! even ones; 0 is the session itself (Ping, GoAway).
//!
//! Invariants, kept by every operation:
//! - a stream never receives more Data than its receive window allows (a peer that sends
//!   more is in error and the session ends with GoAway "protocol error"), and never sends
//!   more than its send window: data beyond the window waits in the stream until the peer
//!   grants more with a WindowUpdate;
//! - windows start at [`INITIAL_WINDOW_BYTES`] and are topped up once half of it has been
//!   consumed, as yamux does;
//! - at most [`STREAMS_MAX`] streams are open; a stream opened beyond that is reset, as
//!   yamux resets streams beyond its accept backlog;
//! - a stream is forgotten once both sides have closed it or either has reset it;
//! - after an error the session is over: [`Session::receive`] keeps answering the error.
//!
//! Payloads are handed out as [`Bytes`] slices of the receive buffer, without copying.
//! Keepalives: [`Session::tick`] pings every [`KEEPALIVE_INTERVAL_MS`] and fails the session
//! when a ping goes unanswered for [`KEEPALIVE_TIMEOUT_MS`].

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::collections::{HashMap, VecDeque};

pub const HEADER_BYTES: usize = 12;
/// The only protocol version.
pub const VERSION: u8 = 0;
/// Every stream's window when it opens; praetor never asks for a larger one.
pub const INITIAL_WINDOW_BYTES: u32 = 256 * 1024;
/// Open streams per session (yamux's accept backlog is 256 waiting streams; Consul keeps
/// one stream per call in flight, and a busy client agent has many).
pub const STREAMS_MAX: usize = 1024;
/// How often a session pings its peer (yamux's `KeepAliveInterval`).
pub const KEEPALIVE_INTERVAL_MS: u64 = 30_000;
/// How long a ping may go unanswered (yamux's `ConnectionWriteTimeout`).
pub const KEEPALIVE_TIMEOUT_MS: u64 = 10_000;

/// Frame types.
pub mod frame {
    pub const DATA: u8 = 0;
    pub const WINDOW_UPDATE: u8 = 1;
    pub const PING: u8 = 2;
    pub const GO_AWAY: u8 = 3;
}

/// Header flags.
pub mod flag {
    pub const SYN: u16 = 1;
    pub const ACK: u16 = 2;
    pub const FIN: u16 = 4;
    pub const RST: u16 = 8;
}

/// GoAway codes.
pub mod go_away {
    pub const NORMAL: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INTERNAL_ERROR: u32 = 2;
}

/// One frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub flags: u16,
    pub stream_id: u32,
    /// Data: the payload's length; WindowUpdate: the window's increase; Ping: an opaque
    /// value echoed back; GoAway: the code.
    pub length: u32,
}

impl Header {
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(HEADER_BYTES);
        out.put_u8(VERSION);
        out.put_u8(self.kind);
        out.put_u16(self.flags);
        out.put_u32(self.stream_id);
        out.put_u32(self.length);
    }

    /// Decodes a header from its 12 bytes.
    pub fn decode(bytes: &[u8; HEADER_BYTES]) -> Result<Header, YamuxError> {
        if bytes[0] != VERSION {
            return Err(YamuxError::Version(bytes[0]));
        }
        let kind = bytes[1];
        if kind > frame::GO_AWAY {
            return Err(YamuxError::FrameType(kind));
        }
        Ok(Header {
            kind,
            flags: u16::from_be_bytes([bytes[2], bytes[3]]),
            stream_id: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            length: u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
        })
    }
}

/// Why a session ended. Each says what the session did about it: every error but
/// [`YamuxError::RemoteGoAway`] queued a GoAway for the peer in the outbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum YamuxError {
    Version(u8),
    FrameType(u8),
    /// A stream opened twice.
    DuplicateStream(u32),
    /// A stream opened with an ID its opener may not use (0, or the wrong parity).
    StreamId(u32),
    /// More data than the stream's receive window allowed.
    WindowExceeded {
        stream_id: u32,
        window: u32,
        length: u32,
    },
    /// A Data frame longer than any window.
    FrameTooLarge(u32),
    /// FIN on a stream that had already received one.
    UnexpectedFin(u32),
    /// The peer ended the session with an error code.
    RemoteGoAway(u32),
    /// A ping went unanswered.
    KeepaliveTimeout,
    /// All stream IDs of this side are used up.
    StreamsExhausted,
}

impl std::fmt::Display for YamuxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            YamuxError::Version(v) => write!(f, "invalid protocol version {v}"),
            YamuxError::FrameType(t) => write!(f, "invalid msg type {t}"),
            YamuxError::DuplicateStream(id) => write!(f, "duplicate stream {id} initiated"),
            YamuxError::StreamId(id) => write!(f, "stream {id} opened with an invalid ID"),
            YamuxError::WindowExceeded {
                stream_id,
                window,
                length,
            } => write!(
                f,
                "recv window exceeded (stream: {stream_id}, remain: {window}, recv: {length})"
            ),
            YamuxError::FrameTooLarge(length) => {
                write!(f, "data frame of {length} bytes exceeds any window")
            }
            YamuxError::UnexpectedFin(id) => write!(f, "unexpected FIN flag on stream {id}"),
            YamuxError::RemoteGoAway(code) => write!(f, "remote go away with code {code}"),
            YamuxError::KeepaliveTimeout => write!(f, "keepalive timeout"),
            YamuxError::StreamsExhausted => write!(f, "streams exhausted"),
        }
    }
}

impl std::error::Error for YamuxError {}

/// Which side of the connection this session is: who opens odd stream IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// What a call to [`Session::receive`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The peer opened a stream.
    Opened(u32),
    /// The peer acknowledged a stream this side opened.
    Established(u32),
    /// Bytes for a stream; [`Session::consumed`] must be told when they have been taken.
    Data(u32, Bytes),
    /// The peer will send nothing more on the stream (FIN).
    Closed(u32),
    /// The stream is gone (RST from the peer); it is forgotten.
    Reset(u32),
    /// The peer will accept no new streams (GoAway, normal termination).
    GoAway,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Opened here, not yet acknowledged.
    SynSent,
    /// Opened by the peer, not yet acknowledged from here.
    SynReceived,
    Established,
    /// This side sent FIN.
    LocalClosed,
    /// The peer sent FIN.
    RemoteClosed,
}

#[derive(Debug)]
struct Stream {
    state: State,
    /// How much more the peer may send.
    receive_window: u32,
    /// Delivered to the caller but not yet consumed.
    unconsumed: u32,
    /// How much more this side may send.
    send_window: u32,
    /// Data waiting for the send window.
    pending: VecDeque<Bytes>,
    /// Close once `pending` has gone out.
    fin_pending: bool,
}

impl Stream {
    fn new(state: State) -> Stream {
        Stream {
            state,
            receive_window: INITIAL_WINDOW_BYTES,
            unconsumed: 0,
            send_window: INITIAL_WINDOW_BYTES,
            pending: VecDeque::new(),
            fin_pending: false,
        }
    }

    /// The flags this side's next frame on the stream carries, and the state after it: an
    /// accepted stream's first frame acknowledges it.
    fn take_flags(&mut self) -> u16 {
        if self.state == State::SynReceived {
            self.state = State::Established;
            flag::ACK
        } else {
            0
        }
    }
}

/// One yamux session, either side.
#[derive(Debug)]
pub struct Session {
    role: Role,
    /// Keyed by IDs the peer picks: ahash is randomly keyed, as safe against chosen keys as
    /// std's hasher and cheaper per frame.
    streams: HashMap<u32, Stream, ahash::RandomState>,
    /// The next ID this side opens a stream with.
    next_stream_id: u32,
    outbox: BytesMut,
    /// This side sent GoAway: streams the peer opens are reset.
    local_go_away: bool,
    /// The peer sent GoAway: this side opens no streams.
    remote_go_away: bool,
    /// The ping in flight: its opaque value and when it was sent.
    ping: Option<(u32, u64)>,
    next_ping_id: u32,
    last_ping_ms: u64,
    failed: Option<YamuxError>,
}

impl Session {
    pub fn new(role: Role, now_ms: u64) -> Session {
        Session {
            role,
            streams: HashMap::default(),
            next_stream_id: match role {
                Role::Client => 1,
                Role::Server => 2,
            },
            outbox: BytesMut::new(),
            local_go_away: false,
            remote_go_away: false,
            ping: None,
            next_ping_id: 0,
            last_ping_ms: now_ms,
            failed: None,
        }
    }

    /// Bytes to write to the peer, taken out.
    pub fn take_outbox(&mut self) -> BytesMut {
        self.outbox.split()
    }

    pub fn has_output(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Streams open (in any state short of forgotten).
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    pub fn is_open(&self, stream_id: u32) -> bool {
        self.streams.contains_key(&stream_id)
    }

    /// Bytes the stream holds back for lack of send window.
    pub fn pending_bytes(&self, stream_id: u32) -> usize {
        self.streams
            .get(&stream_id)
            .map_or(0, |s| s.pending.iter().map(Bytes::len).sum())
    }

    /// The error that ended the session, if one did.
    pub fn failure(&self) -> Option<&YamuxError> {
        self.failed.as_ref()
    }

    fn control(&mut self, kind: u8, flags: u16, stream_id: u32, length: u32) {
        Header {
            kind,
            flags,
            stream_id,
            length,
        }
        .encode(&mut self.outbox);
    }

    /// Ends the session with `error`, telling the peer unless it ended it.
    fn fail(&mut self, error: YamuxError) -> YamuxError {
        if self.failed.is_none() {
            if !matches!(error, YamuxError::RemoteGoAway(_)) {
                let code = match error {
                    YamuxError::KeepaliveTimeout | YamuxError::StreamsExhausted => {
                        go_away::INTERNAL_ERROR
                    }
                    _ => go_away::PROTOCOL_ERROR,
                };
                self.control(frame::GO_AWAY, 0, 0, code);
            }
            self.failed = Some(error.clone());
        }
        error
    }

    /// Reads every complete frame at the front of `input`, appending what happened to
    /// `events`. Incomplete frames stay in `input` for the next call.
    pub fn receive(
        &mut self,
        input: &mut BytesMut,
        events: &mut Vec<Event>,
    ) -> Result<(), YamuxError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        while input.len() >= HEADER_BYTES {
            let bytes: &[u8; HEADER_BYTES] = input[..HEADER_BYTES].try_into().expect("12 bytes");
            let header = Header::decode(bytes).map_err(|e| self.fail(e))?;
            if header.kind == frame::DATA {
                if header.length > INITIAL_WINDOW_BYTES {
                    return Err(self.fail(YamuxError::FrameTooLarge(header.length)));
                }
                if input.len() < HEADER_BYTES + header.length as usize {
                    // Room for the rest of a frame that is bounded by the window.
                    input.reserve(HEADER_BYTES + header.length as usize - input.len());
                    return Ok(());
                }
            }
            input.advance(HEADER_BYTES);
            let payload = if header.kind == frame::DATA {
                input.split_to(header.length as usize).freeze()
            } else {
                Bytes::new()
            };
            self.handle(header, payload, events)
                .map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    fn handle(
        &mut self,
        header: Header,
        payload: Bytes,
        events: &mut Vec<Event>,
    ) -> Result<(), YamuxError> {
        match header.kind {
            frame::PING => {
                if header.flags & flag::SYN != 0 {
                    self.control(frame::PING, flag::ACK, 0, header.length);
                } else if self.ping.is_some_and(|(id, _)| id == header.length) {
                    self.ping = None;
                }
                Ok(())
            }
            frame::GO_AWAY => match header.length {
                go_away::NORMAL => {
                    self.remote_go_away = true;
                    events.push(Event::GoAway);
                    Ok(())
                }
                code => Err(YamuxError::RemoteGoAway(code)),
            },
            _ => self.stream_frame(header, payload, events),
        }
    }

    fn stream_frame(
        &mut self,
        header: Header,
        payload: Bytes,
        events: &mut Vec<Event>,
    ) -> Result<(), YamuxError> {
        let id = header.stream_id;
        if header.flags & flag::SYN != 0 && !self.open_incoming(id, events)? {
            // Refused with RST; its data is dropped.
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&id) else {
            // A stream this side reset or never knew: its frames are dropped, as yamux
            // drops them.
            return Ok(());
        };
        if header.flags & flag::ACK != 0 && stream.state == State::SynSent {
            stream.state = State::Established;
            events.push(Event::Established(id));
        }
        if header.kind == frame::WINDOW_UPDATE {
            stream.send_window = stream.send_window.saturating_add(header.length);
        } else if !payload.is_empty() {
            if payload.len() as u32 > stream.receive_window {
                return Err(YamuxError::WindowExceeded {
                    stream_id: id,
                    window: stream.receive_window,
                    length: payload.len() as u32,
                });
            }
            stream.receive_window -= payload.len() as u32;
            stream.unconsumed += payload.len() as u32;
            events.push(Event::Data(id, payload));
        }
        if header.flags & flag::RST != 0 {
            self.streams.remove(&id);
            events.push(Event::Reset(id));
            return Ok(());
        }
        if header.flags & flag::FIN != 0 {
            let stream = self.streams.get_mut(&id).expect("present above");
            match stream.state {
                State::SynSent | State::SynReceived | State::Established => {
                    stream.state = State::RemoteClosed
                }
                State::LocalClosed => {
                    self.streams.remove(&id);
                }
                State::RemoteClosed => return Err(YamuxError::UnexpectedFin(id)),
            }
            events.push(Event::Closed(id));
        }
        self.flush(id);
        Ok(())
    }

    /// A stream the peer opens. `Ok(false)` when it is refused with RST (this side is
    /// going away, or too many streams are open).
    fn open_incoming(&mut self, id: u32, events: &mut Vec<Event>) -> Result<bool, YamuxError> {
        let peer_parity = match self.role {
            Role::Server => 1,
            Role::Client => 0,
        };
        if id == 0 || id % 2 != peer_parity {
            return Err(YamuxError::StreamId(id));
        }
        if self.streams.contains_key(&id) {
            return Err(YamuxError::DuplicateStream(id));
        }
        if self.local_go_away || self.streams.len() >= STREAMS_MAX {
            self.control(frame::WINDOW_UPDATE, flag::RST, id, 0);
            return Ok(false);
        }
        self.streams.insert(id, Stream::new(State::SynReceived));
        events.push(Event::Opened(id));
        // Accepted at once: acknowledged now, as yamux's Accept sends its window update.
        let stream = self.streams.get_mut(&id).expect("just inserted");
        let flags = stream.take_flags();
        self.control(frame::WINDOW_UPDATE, flags, id, 0);
        Ok(true)
    }

    /// Opens a stream from this side; its SYN goes out at once.
    pub fn open(&mut self) -> Result<u32, YamuxError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        if self.remote_go_away {
            return Err(YamuxError::RemoteGoAway(go_away::NORMAL));
        }
        let id = self.next_stream_id;
        self.next_stream_id = id
            .checked_add(2)
            .ok_or_else(|| self.fail(YamuxError::StreamsExhausted))?;
        debug_assert!(
            !self.streams.contains_key(&id),
            "stream IDs are never reused"
        );
        self.streams.insert(id, Stream::new(State::SynSent));
        self.control(frame::WINDOW_UPDATE, flag::SYN, id, 0);
        Ok(id)
    }

    /// Queues `data` on the stream; as much as the send window allows goes into the
    /// outbox now, the rest when the peer grants more. Data for a stream that is gone or
    /// that this side closed is dropped (`false`).
    pub fn send(&mut self, stream_id: u32, data: Bytes) -> bool {
        let Some(stream) = self.streams.get_mut(&stream_id) else {
            return false;
        };
        if stream.fin_pending || stream.state == State::LocalClosed || self.failed.is_some() {
            return false;
        }
        if !data.is_empty() {
            stream.pending.push_back(data);
        }
        self.flush(stream_id);
        true
    }

    /// Half-closes the stream once its queued data has gone out. Closing again is a no-op,
    /// as in yamux: a second FIN would be a protocol error the peer fails the session on.
    pub fn close(&mut self, stream_id: u32) {
        if let Some(stream) = self.streams.get_mut(&stream_id) {
            if stream.state == State::LocalClosed {
                debug_assert!(!stream.fin_pending, "a FIN pending only before it is sent");
                return;
            }
            stream.fin_pending = true;
            self.flush(stream_id);
        }
    }

    /// Resets the stream at once; it is forgotten, its queued data dropped.
    pub fn reset(&mut self, stream_id: u32) {
        if self.streams.remove(&stream_id).is_some() {
            self.control(frame::WINDOW_UPDATE, flag::RST, stream_id, 0);
        }
    }

    /// The caller has taken `bytes` of the stream's delivered data: once half a window is
    /// free again, the peer is granted it.
    pub fn consumed(&mut self, stream_id: u32, bytes: usize) {
        let Some(stream) = self.streams.get_mut(&stream_id) else {
            return;
        };
        debug_assert!(
            bytes as u64 <= stream.unconsumed as u64,
            "consumed what came"
        );
        stream.unconsumed = stream.unconsumed.saturating_sub(bytes as u32);
        let delta = INITIAL_WINDOW_BYTES - stream.unconsumed - stream.receive_window;
        if delta >= INITIAL_WINDOW_BYTES / 2 && stream.state != State::RemoteClosed {
            stream.receive_window += delta;
            let flags = stream.take_flags();
            self.control(frame::WINDOW_UPDATE, flags, stream_id, delta);
        }
        debug_assert!(stream_window_ok(self.streams.get(&stream_id)));
    }

    /// Writes the stream's queued data within its send window, then its FIN if asked for.
    fn flush(&mut self, stream_id: u32) {
        let Some(stream) = self.streams.get_mut(&stream_id) else {
            return;
        };
        while stream.send_window > 0 {
            let Some(front) = stream.pending.front_mut() else {
                break;
            };
            let length = front.len().min(stream.send_window as usize);
            let chunk = front.split_to(length);
            if front.is_empty() {
                stream.pending.pop_front();
            }
            stream.send_window -= length as u32;
            let flags = stream.take_flags();
            Header {
                kind: frame::DATA,
                flags,
                stream_id,
                length: length as u32,
            }
            .encode(&mut self.outbox);
            self.outbox.extend_from_slice(&chunk);
        }
        if stream.fin_pending && stream.pending.is_empty() {
            stream.fin_pending = false;
            let flags = stream.take_flags() | flag::FIN;
            match stream.state {
                State::RemoteClosed => {
                    self.streams.remove(&stream_id);
                }
                State::LocalClosed => unreachable!("close sends one FIN per stream"),
                _ => stream.state = State::LocalClosed,
            }
            self.control(frame::WINDOW_UPDATE, flags, stream_id, 0);
        }
    }

    /// Tells the peer this side accepts no more streams.
    pub fn go_away(&mut self) {
        if !self.local_go_away {
            self.local_go_away = true;
            self.control(frame::GO_AWAY, 0, 0, go_away::NORMAL);
        }
    }

    /// Keepalive: pings when one is due; fails the session when the last ping went
    /// unanswered too long.
    pub fn tick(&mut self, now_ms: u64) -> Result<(), YamuxError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        if let Some((_, sent_ms)) = self.ping {
            if now_ms.saturating_sub(sent_ms) >= KEEPALIVE_TIMEOUT_MS {
                return Err(self.fail(YamuxError::KeepaliveTimeout));
            }
            return Ok(());
        }
        if now_ms.saturating_sub(self.last_ping_ms) >= KEEPALIVE_INTERVAL_MS {
            let id = self.next_ping_id;
            self.next_ping_id = self.next_ping_id.wrapping_add(1);
            self.ping = Some((id, now_ms));
            self.last_ping_ms = now_ms;
            self.control(frame::PING, flag::SYN, 0, id);
        }
        Ok(())
    }
}

/// A stream's receive accounting never exceeds its window.
fn stream_window_ok(stream: Option<&Stream>) -> bool {
    stream.is_none_or(|s| {
        s.receive_window as u64 + s.unconsumed as u64 <= INITIAL_WINDOW_BYTES as u64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Carries one side's outbox to the other and returns what the other saw.
    fn deliver(from: &mut Session, to: &mut Session) -> Vec<Event> {
        let mut input = from.take_outbox();
        let mut events = Vec::new();
        to.receive(&mut input, &mut events).unwrap();
        assert!(input.is_empty(), "whole frames were delivered");
        events
    }

    fn data_of(events: &[Event], id: u32) -> Vec<u8> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Data(s, bytes) if *s == id => Some(bytes.to_vec()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    #[test]
    fn a_stream_opens_carries_data_both_ways_and_closes() {
        let mut client = Session::new(Role::Client, 0);
        let mut server = Session::new(Role::Server, 0);
        let id = client.open().unwrap();
        assert_eq!(id, 1);
        assert!(client.send(id, Bytes::from_static(b"hello")));
        let events = deliver(&mut client, &mut server);
        assert_eq!(events[0], Event::Opened(1));
        assert_eq!(data_of(&events, 1), b"hello");
        server.consumed(1, 5);
        assert!(server.send(1, Bytes::from_static(b"world")));
        server.close(1);
        let events = deliver(&mut server, &mut client);
        assert_eq!(
            events,
            vec![
                Event::Established(1),
                Event::Data(1, Bytes::from_static(b"world")),
                Event::Closed(1)
            ]
        );
        client.close(1);
        assert!(!client.is_open(1), "closed on both sides");
        let events = deliver(&mut client, &mut server);
        assert_eq!(events, vec![Event::Closed(1)]);
        assert!(!server.is_open(1));
        assert_eq!((client.stream_count(), server.stream_count()), (0, 0));
    }

    /// Found by the `yamux` fuzz target: a second `close` sent a second FIN, and the peer
    /// failed the whole session with "unexpected FIN flag".
    #[test]
    fn closing_twice_sends_one_fin() {
        let mut client = Session::new(Role::Client, 0);
        let mut server = Session::new(Role::Server, 0);
        let id = client.open().unwrap();
        deliver(&mut client, &mut server);
        deliver(&mut server, &mut client);
        client.close(id);
        client.close(id);
        let events = deliver(&mut client, &mut server);
        assert_eq!(
            events,
            vec![Event::Closed(id)],
            "one FIN, the session alive"
        );
        assert!(server.failure().is_none());
        assert!(server.send(id, Bytes::from_static(b"still open this way")));
        let events = deliver(&mut server, &mut client);
        assert_eq!(data_of(&events, id), b"still open this way");
        assert!(client.failure().is_none());
    }

    #[test]
    fn data_beyond_the_send_window_waits_for_an_update() {
        let mut client = Session::new(Role::Client, 0);
        let mut server = Session::new(Role::Server, 0);
        let id = client.open().unwrap();
        let big = Bytes::from(vec![7u8; INITIAL_WINDOW_BYTES as usize + 1000]);
        client.send(id, big.clone());
        assert_eq!(
            client.pending_bytes(id),
            1000,
            "held back beyond the window"
        );
        let events = deliver(&mut client, &mut server);
        assert_eq!(
            data_of(&events, id).len(),
            INITIAL_WINDOW_BYTES as usize,
            "one window went out"
        );
        // Consuming less than half a window grants nothing yet.
        server.consumed(id, 1000);
        let events = deliver(&mut server, &mut client);
        assert_eq!(events, vec![Event::Established(id)]);
        assert_eq!(client.pending_bytes(id), 1000);
        server.consumed(id, INITIAL_WINDOW_BYTES as usize - 1000);
        deliver(&mut server, &mut client);
        assert_eq!(client.pending_bytes(id), 0, "the update let the rest out");
        let events = deliver(&mut client, &mut server);
        assert_eq!(data_of(&events, id).len(), 1000);
    }

    #[test]
    fn a_peer_that_ignores_the_window_ends_the_session() {
        let mut server = Session::new(Role::Server, 0);
        let mut input = BytesMut::new();
        Header {
            kind: frame::WINDOW_UPDATE,
            flags: flag::SYN,
            stream_id: 1,
            length: 0,
        }
        .encode(&mut input);
        for _ in 0..2 {
            Header {
                kind: frame::DATA,
                flags: 0,
                stream_id: 1,
                length: INITIAL_WINDOW_BYTES,
            }
            .encode(&mut input);
            input.extend_from_slice(&vec![0u8; INITIAL_WINDOW_BYTES as usize]);
        }
        let mut events = Vec::new();
        let error = server.receive(&mut input, &mut events).unwrap_err();
        assert!(
            matches!(error, YamuxError::WindowExceeded { .. }),
            "{error}"
        );
        let out = server.take_outbox();
        assert_eq!(
            &out[out.len() - 12..],
            &go_away_frame(go_away::PROTOCOL_ERROR)[..]
        );
        assert_eq!(
            server.receive(&mut BytesMut::new(), &mut events),
            Err(error),
            "the session stays failed"
        );
    }

    fn go_away_frame(code: u32) -> BytesMut {
        let mut out = BytesMut::new();
        Header {
            kind: frame::GO_AWAY,
            flags: 0,
            stream_id: 0,
            length: code,
        }
        .encode(&mut out);
        out
    }

    #[test]
    fn bad_frames_are_protocol_errors() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0], "version"),
            (vec![0, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0], "msg type"),
            // A server never accepts an even stream from its client, nor stream 0.
            (vec![0, 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0], "invalid ID"),
            (vec![0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0], "invalid ID"),
            (
                vec![0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff],
                "exceeds any window",
            ),
        ];
        for (bytes, needle) in cases {
            let mut server = Session::new(Role::Server, 0);
            let mut input = BytesMut::from(&bytes[..]);
            let error = server.receive(&mut input, &mut Vec::new()).unwrap_err();
            assert!(error.to_string().contains(needle), "{error}");
        }
        // A stream opened twice.
        let mut server = Session::new(Role::Server, 0);
        let mut input = BytesMut::new();
        for _ in 0..2 {
            Header {
                kind: frame::WINDOW_UPDATE,
                flags: flag::SYN,
                stream_id: 3,
                length: 0,
            }
            .encode(&mut input);
        }
        assert_eq!(
            server.receive(&mut input, &mut Vec::new()),
            Err(YamuxError::DuplicateStream(3))
        );
    }

    #[test]
    fn frames_cut_anywhere_arrive_whole() {
        let mut client = Session::new(Role::Client, 0);
        let a = client.open().unwrap();
        let b = client.open().unwrap();
        client.send(a, Bytes::from_static(b"first stream"));
        client.send(b, Bytes::from_static(b"second"));
        client.close(b);
        let wire = client.take_outbox().freeze();
        for cut in 0..wire.len() {
            let mut server = Session::new(Role::Server, 0);
            let mut input = BytesMut::from(&wire[..cut]);
            let mut events = Vec::new();
            server.receive(&mut input, &mut events).unwrap();
            input.extend_from_slice(&wire[cut..]);
            server.receive(&mut input, &mut events).unwrap();
            assert!(input.is_empty());
            assert_eq!(data_of(&events, a), b"first stream", "cut at {cut}");
            assert_eq!(data_of(&events, b), b"second", "cut at {cut}");
            assert!(events.contains(&Event::Closed(b)));
        }
    }

    #[test]
    fn reset_forgets_the_stream_and_drops_its_frames() {
        let mut client = Session::new(Role::Client, 0);
        let mut server = Session::new(Role::Server, 0);
        let id = client.open().unwrap();
        deliver(&mut client, &mut server);
        server.reset(id);
        assert!(!server.is_open(id));
        // Data the client sent before hearing of the reset is dropped quietly.
        client.send(id, Bytes::from_static(b"late"));
        let events = deliver(&mut client, &mut server);
        assert!(events.is_empty(), "{events:?}");
        let events = deliver(&mut server, &mut client);
        assert!(events.contains(&Event::Reset(id)));
        assert!(!client.is_open(id));
    }

    #[test]
    fn streams_beyond_the_limit_and_after_go_away_are_refused() {
        let mut server = Session::new(Role::Server, 0);
        let mut input = BytesMut::new();
        for n in 0..=STREAMS_MAX as u32 {
            Header {
                kind: frame::WINDOW_UPDATE,
                flags: flag::SYN,
                stream_id: 2 * n + 1,
                length: 0,
            }
            .encode(&mut input);
        }
        let mut events = Vec::new();
        server.receive(&mut input, &mut events).unwrap();
        assert_eq!(server.stream_count(), STREAMS_MAX);
        let out = server.take_outbox();
        let last = Header::decode(out[out.len() - 12..].try_into().unwrap()).unwrap();
        assert_eq!(
            (last.flags, last.stream_id),
            (flag::RST, 2 * STREAMS_MAX as u32 + 1)
        );

        let mut server = Session::new(Role::Server, 0);
        server.go_away();
        let mut client = Session::new(Role::Client, 0);
        let events = deliver(&mut server, &mut client);
        assert_eq!(events, vec![Event::GoAway]);
        assert!(
            client.open().is_err(),
            "no streams after the peer's go away"
        );
        let mut input = BytesMut::new();
        Header {
            kind: frame::WINDOW_UPDATE,
            flags: flag::SYN,
            stream_id: 1,
            length: 0,
        }
        .encode(&mut input);
        server.receive(&mut input, &mut Vec::new()).unwrap();
        assert_eq!(server.stream_count(), 0);
    }

    #[test]
    fn pings_are_answered_and_keepalives_time_out() {
        let mut client = Session::new(Role::Client, 0);
        let mut server = Session::new(Role::Server, 0);
        client.tick(KEEPALIVE_INTERVAL_MS).unwrap();
        assert!(client.has_output(), "a ping is due");
        deliver(&mut client, &mut server);
        deliver(&mut server, &mut client);
        assert!(client.ping.is_none(), "the answer cleared the ping");
        // The next ping is never answered.
        client.tick(2 * KEEPALIVE_INTERVAL_MS).unwrap();
        client.take_outbox();
        client
            .tick(2 * KEEPALIVE_INTERVAL_MS + KEEPALIVE_TIMEOUT_MS - 1)
            .unwrap();
        assert_eq!(
            client.tick(2 * KEEPALIVE_INTERVAL_MS + KEEPALIVE_TIMEOUT_MS),
            Err(YamuxError::KeepaliveTimeout)
        );
        assert_eq!(
            &client.take_outbox()[..],
            &go_away_frame(go_away::INTERNAL_ERROR)[..]
        );
    }

    #[test]
    fn a_remote_go_away_with_an_error_ends_the_session_without_answering() {
        let mut server = Session::new(Role::Server, 0);
        let mut input = go_away_frame(go_away::PROTOCOL_ERROR);
        assert_eq!(
            server.receive(&mut input, &mut Vec::new()),
            Err(YamuxError::RemoteGoAway(go_away::PROTOCOL_ERROR))
        );
        assert!(!server.has_output());
    }
}
