//! Server RPC framing on :8300.
//!
//! As in Consul, the first byte of a connection selects the protocol
//! ([`crate::proto::rpc_select`]); two of them carry praetor's own frames:
//! - [`PROTOCOL_RAFT`]: a one-way stream of Raft messages from a peer (Consul's Raft byte).
//! - [`PROTOCOL_RPC`]: multiplexed request/response frames (a typed call one server hands to
//!   another, a ping), on a byte Consul does not use: Consul's own RPC (bytes 0 and 4) is typed msgpack calls, see
//!   [`crate::proto::msgpack_rpc`] and [`crate::proto::yamux`].
//!
//! After that byte, both protocols are a sequence of frames:
//! `body_len u32 | kind u8 | request_id u64 | payload`, little endian, where `body_len` counts
//! everything after itself. Payloads are msgpack (`rmp-serde`) or raw bytes, per kind.
//! [`FrameDecoder`] decodes frames in place from a receive buffer (`bytes::BytesMut`), handing
//! out payloads as `Bytes` slices of it without copying.
//!
//! Invariant: a frame longer than [`FRAME_BYTES_MAX`] is a protocol error, detected from its
//! length field before any of it is buffered.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const PROTOCOL_RAFT: u8 = 0x01;
pub const PROTOCOL_RPC: u8 = 0x13;

/// Largest frame body: a 1 MiB snapshot chunk, or a typed call handed on whole (a
/// transaction or a registration up to the HTTP body limit), with room around it.
pub const FRAME_BYTES_MAX: usize = 80 << 20;
/// `kind u8 | request_id u64` after the length.
pub const FRAME_HEADER_BYTES: usize = 9;
/// Most room reserved ahead for a frame not yet received: a frame's claimed length is only
/// a claim until its bytes arrive, so a peer that sends a header claiming 80 MB and then
/// nothing costs this much, and a real large frame grows the buffer as its bytes come.
pub const FRAME_RESERVE_AHEAD_BYTES: usize = 1 << 20;

/// Frame kinds.
pub mod kind {
    /// Raft stream: payload is `(from, Message)` in msgpack.
    pub const RAFT_MESSAGE: u8 = 1;
    // 2 and 3 carried raw HTTP/1.1 requests and answers between servers before every
    // request became a typed call; they stay unused, so an old server's frame is refused
    // as an unknown kind, not misread.
    /// RPC response: the request failed on the server; payload is a UTF-8 reason.
    pub const ERROR: u8 = 4;
    /// RPC request: `Status.Ping`; answered with an empty `PONG`.
    pub const PING: u8 = 5;
    pub const PONG: u8 = 6;
    // 7 and 8 carried auto-encrypt's request and answer before `AutoEncrypt.Sign` became
    // a typed call; they stay unused so that an old agent's frame is refused, not misread.
    /// RPC request: one of Consul's typed calls handed to another praetor server (a
    /// follower's to the leader, or to another datacenter): a hop count byte, then the call
    /// as net/rpc writes it ([`crate::proto::msgpack_rpc`]: header, then body).
    pub const TYPED_CALL: u8 = 9;
    /// RPC response: the typed call's answer as net/rpc writes it (header, then body).
    pub const TYPED_ANSWER: u8 = 10;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub request_id: u64,
    pub payload: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLarge(usize),
    Truncated,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(n) => write!(f, "frame of {n} bytes exceeds {FRAME_BYTES_MAX}"),
            FrameError::Truncated => write!(f, "frame shorter than its header"),
        }
    }
}

/// Appends one frame to `out`.
pub fn encode_frame(out: &mut BytesMut, kind: u8, request_id: u64, payload: &[u8]) {
    let body_len = FRAME_HEADER_BYTES + payload.len();
    assert!(
        body_len <= FRAME_BYTES_MAX,
        "refusing to encode a frame the peer would reject"
    );
    out.reserve(4 + body_len);
    out.put_u32_le(body_len as u32);
    out.put_u8(kind);
    out.put_u64_le(request_id);
    out.put_slice(payload);
}

/// Takes the next complete frame off the front of `buf`, or `None` when more bytes are
/// needed. The payload shares `buf`'s allocation.
pub fn decode_frame(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let body_len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if body_len > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge(body_len));
    }
    if body_len < FRAME_HEADER_BYTES {
        return Err(FrameError::Truncated);
    }
    if buf.len() < 4 + body_len {
        // Reserve for the rest of the frame, up to a bound, so the next reads of a frame
        // that is really coming do not reallocate repeatedly.
        buf.reserve((4 + body_len - buf.len()).min(FRAME_RESERVE_AHEAD_BYTES));
        return Ok(None);
    }
    buf.advance(4);
    let mut body = buf.split_to(body_len).freeze();
    let kind = body.get_u8();
    let request_id = body.get_u64_le();
    Ok(Some(Frame {
        kind,
        request_id,
        payload: body,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_length_reserves_only_a_bounded_room_ahead() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&(FRAME_BYTES_MAX as u32).to_le_bytes());
        assert!(decode_frame(&mut buf).unwrap().is_none());
        assert!(
            buf.capacity() <= 2 * (4 + FRAME_RESERVE_AHEAD_BYTES),
            "a bare header reserved {} bytes",
            buf.capacity()
        );
        // A frame larger than the bound still arrives whole, however it is cut.
        let payload = vec![7u8; 3 * FRAME_RESERVE_AHEAD_BYTES];
        let mut wire = BytesMut::new();
        encode_frame(&mut wire, kind::PING, 9, &payload);
        let mut buf = BytesMut::new();
        let mut frame = None;
        for piece in wire.chunks(64 * 1024) {
            buf.extend_from_slice(piece);
            if let Some(f) = decode_frame(&mut buf).unwrap() {
                frame = Some(f);
            }
        }
        let frame = frame.expect("the frame arrived");
        assert_eq!((frame.kind, frame.request_id), (kind::PING, 9));
        assert_eq!(&frame.payload[..], &payload[..]);
    }

    #[test]
    fn frames_round_trip_in_pieces() {
        let mut wire = BytesMut::new();
        encode_frame(&mut wire, kind::TYPED_CALL, 7, b"\x00a typed call");
        encode_frame(&mut wire, kind::PING, 8, b"");
        let wire = wire.freeze();
        for split in 0..wire.len() {
            let mut buf = BytesMut::new();
            buf.extend_from_slice(&wire[..split]);
            let mut frames = Vec::new();
            while let Some(f) = decode_frame(&mut buf).unwrap() {
                frames.push(f);
            }
            buf.extend_from_slice(&wire[split..]);
            while let Some(f) = decode_frame(&mut buf).unwrap() {
                frames.push(f);
            }
            assert_eq!(frames.len(), 2, "split at {split}");
            assert_eq!(frames[0].request_id, 7);
            assert_eq!(&frames[0].payload[..], b"\x00a typed call");
            assert_eq!((frames[1].kind, frames[1].payload.len()), (kind::PING, 0));
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let mut buf = BytesMut::new();
        buf.put_u32_le((FRAME_BYTES_MAX + 1) as u32);
        assert_eq!(
            decode_frame(&mut buf),
            Err(FrameError::TooLarge(FRAME_BYTES_MAX + 1))
        );
        let mut buf = BytesMut::new();
        buf.put_u32_le(3);
        buf.put_slice(&[1, 2, 3]);
        assert_eq!(decode_frame(&mut buf), Err(FrameError::Truncated));
    }
}
