//! `grpc` checks: the standard `grpc.health.v1.Health/Check` call over HTTP/2 without TLS
//! (h2c, prior knowledge). Passing when the server answers `SERVING`; anything else —
//! another status, an error status in the trailers, a reset, no answer within the timeout —
//! is critical.
//!
//! The client is deliberately minimal: one connection, one stream, HPACK literals without
//! Huffman coding on the way out, and no HPACK decoding on the way in (the verdict comes
//! from the response message; a stream that ends without one is a failure). Frames larger
//! than [`FRAME_BYTES_MAX`] are refused.

use super::{connect, resolve, ProbeResult};
use crate::store::catalog::Status;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use std::time::Duration;

pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_DATA: u8 = 0;
const FRAME_HEADERS: u8 = 1;
const FRAME_RST_STREAM: u8 = 3;
pub(super) const FRAME_SETTINGS: u8 = 4;
pub(super) const FRAME_PING: u8 = 6;
pub(super) const FRAME_GOAWAY: u8 = 7;
const FLAG_END_STREAM: u8 = 0x1;
pub(super) const FLAG_ACK: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
/// Largest frame accepted from the server (HTTP/2's default `SETTINGS_MAX_FRAME_SIZE`).
const FRAME_BYTES_MAX: usize = 16_384;
/// Most bytes read from the server for one check.
const RESPONSE_BYTES_MAX: usize = 1 << 20;

pub(super) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// One frame taken off the connection.
pub(super) struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream_id: u32,
    pub payload: Vec<u8>,
}

/// Takes the first complete frame out of `buffer`: `None` until all of it has arrived, an
/// error for a frame longer than [`FRAME_BYTES_MAX`].
pub(super) fn take_frame(buffer: &mut Vec<u8>) -> Result<Option<Frame>, String> {
    if buffer.len() < 9 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([0, buffer[0], buffer[1], buffer[2]]) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(format!("frame of {len} bytes exceeds {FRAME_BYTES_MAX}"));
    }
    if buffer.len() < 9 + len {
        return Ok(None);
    }
    let frame = Frame {
        kind: buffer[3],
        flags: buffer[4],
        stream_id: u32::from_be_bytes([buffer[5], buffer[6], buffer[7], buffer[8]]) & 0x7fff_ffff,
        payload: buffer[9..9 + len].to_vec(),
    };
    buffer.drain(..9 + len);
    Ok(Some(frame))
}

/// HPACK integer with an `n`-bit prefix.
fn hpack_int(out: &mut Vec<u8>, first_byte: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first_byte | value as u8);
        return;
    }
    out.push(first_byte | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

fn hpack_string(out: &mut Vec<u8>, text: &str) {
    hpack_int(out, 0x00, 7, text.len());
    out.extend_from_slice(text.as_bytes());
}

/// A header with a name from the static table and a literal value, not indexed.
fn hpack_indexed_name(out: &mut Vec<u8>, index: usize, value: &str) {
    hpack_int(out, 0x00, 4, index);
    hpack_string(out, value);
}

fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x00);
    hpack_string(out, name);
    hpack_string(out, value);
}

/// The request headers block for one `Check` call.
pub fn request_headers(authority: &str) -> Vec<u8> {
    let mut block = Vec::with_capacity(128);
    block.push(0x80 | 3); // :method POST
    block.push(0x80 | 6); // :scheme http
    hpack_indexed_name(&mut block, 4, "/grpc.health.v1.Health/Check");
    hpack_indexed_name(&mut block, 1, authority);
    hpack_literal(&mut block, "content-type", "application/grpc");
    hpack_literal(&mut block, "te", "trailers");
    block
}

/// The length-prefixed `HealthCheckRequest { service }` message.
pub fn request_message(service: &str) -> Vec<u8> {
    let mut proto = Vec::new();
    if !service.is_empty() {
        proto.push(0x0a);
        let mut len = service.len();
        while len >= 0x80 {
            proto.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        proto.push(len as u8);
        proto.extend_from_slice(service.as_bytes());
    }
    let mut message = vec![0u8];
    message.extend_from_slice(&(proto.len() as u32).to_be_bytes());
    message.extend_from_slice(&proto);
    message
}

/// The `status` of a `HealthCheckResponse` body (0 when absent, as proto3 decodes it).
pub fn response_status(proto: &[u8]) -> Result<u64, String> {
    let mut i = 0;
    let varint = |i: &mut usize| -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *proto.get(*i).ok_or("truncated varint")?;
            *i += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint too long".to_string())
    };
    let mut status = 0;
    while i < proto.len() {
        let key = varint(&mut i)?;
        match (key >> 3, key & 7) {
            (1, 0) => status = varint(&mut i)?,
            (_, 0) => {
                varint(&mut i)?;
            }
            (_, 2) => {
                let len = varint(&mut i)? as usize;
                i = i
                    .checked_add(len)
                    .filter(|e| *e <= proto.len())
                    .ok_or("truncated field")?;
            }
            (_, 1) => i += 8,
            (_, 5) => i += 4,
            _ => return Err("unsupported wire type".to_string()),
        }
    }
    Ok(status)
}

fn status_name(status: u64) -> &'static str {
    match status {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNRECOGNIZED",
    }
}

/// Runs one gRPC health check against `target` (`host:port` or `host:port/service`).
pub async fn probe(target: &str, timeout: Duration) -> ProbeResult {
    match monoio::time::timeout(timeout, call(target, timeout)).await {
        Ok(Ok(1)) => (Status::Passing, format!("gRPC check {target}: success")),
        Ok(Ok(status)) => (
            Status::Critical,
            format!(
                "gRPC check {target}: failed with status {}",
                status_name(status)
            ),
        ),
        Ok(Err(e)) => (
            Status::Critical,
            format!("gRPC check {target}: failed: {e}"),
        ),
        Err(_) => (
            Status::Critical,
            format!("gRPC check {target}: failed: context deadline exceeded"),
        ),
    }
}

/// The whole call as the client sends it at once: the preface, empty settings, the request
/// headers and the request message, which ends the stream.
fn call_bytes(authority: &str, service: &str) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(FRAME_SETTINGS, 0, 0, &[]));
    out.extend(frame(
        FRAME_HEADERS,
        FLAG_END_HEADERS,
        1,
        &request_headers(authority),
    ));
    out.extend(frame(
        FRAME_DATA,
        FLAG_END_STREAM,
        1,
        &request_message(service),
    ));
    out
}

/// Adds one DATA frame of the call's stream to the response message; returns the health
/// status once the (uncompressed) message is complete.
fn take_data(message: &mut Vec<u8>, flags: u8, payload: Vec<u8>) -> Result<Option<u64>, String> {
    let data = if flags & FLAG_PADDED != 0 {
        let pad = *payload.first().ok_or("bad padding")? as usize;
        payload
            .get(1..payload.len().saturating_sub(pad))
            .ok_or("bad padding")?
            .to_vec()
    } else {
        payload
    };
    message.extend_from_slice(&data);
    if message.len() >= 5 {
        let len = u32::from_be_bytes([message[1], message[2], message[3], message[4]]) as usize;
        if message[0] != 0 {
            return Err("compressed responses are not supported".to_string());
        }
        if message.len() >= 5 + len {
            return response_status(&message[5..5 + len]).map(Some);
        }
    }
    if flags & FLAG_END_STREAM != 0 {
        return Err("stream ended inside the response message".to_string());
    }
    Ok(None)
}

/// One health call over a fresh HTTP/2 connection: the serving status it answers.
async fn call(target: &str, timeout: Duration) -> Result<u64, String> {
    let (authority, service) = match target.split_once('/') {
        Some((a, s)) => (a, s),
        None => (target, ""),
    };
    let addr = resolve(authority, timeout).await?;
    let mut stream = connect(addr, timeout).await?;
    let (result, _) = stream.write_all(call_bytes(authority, service)).await;
    result.map_err(|e| e.to_string())?;

    let mut buffer: Vec<u8> = Vec::with_capacity(4096);
    let mut message: Vec<u8> = Vec::new();
    let mut total = 0usize;
    loop {
        // Handle every complete frame in the buffer.
        while let Some(Frame {
            kind,
            flags,
            stream_id,
            payload,
        }) = take_frame(&mut buffer)?
        {
            match kind {
                FRAME_SETTINGS if flags & FLAG_ACK == 0 => {
                    let (result, _) = stream
                        .write_all(frame(FRAME_SETTINGS, FLAG_ACK, 0, &[]))
                        .await;
                    result.map_err(|e| e.to_string())?;
                }
                FRAME_PING if flags & FLAG_ACK == 0 => {
                    let (result, _) = stream
                        .write_all(frame(FRAME_PING, FLAG_ACK, 0, &payload))
                        .await;
                    result.map_err(|e| e.to_string())?;
                }
                FRAME_GOAWAY => return Err("connection closed by server (GOAWAY)".to_string()),
                FRAME_RST_STREAM if stream_id == 1 => {
                    return Err("stream reset by server".to_string())
                }
                FRAME_DATA if stream_id == 1 => {
                    if let Some(status) = take_data(&mut message, flags, payload)? {
                        return Ok(status);
                    }
                }
                FRAME_HEADERS if stream_id == 1 && flags & FLAG_END_STREAM != 0 => {
                    return Err(
                        "no health response (the server ended the call with an error status)"
                            .to_string(),
                    );
                }
                _ => {}
            }
        }
        let (result, chunk) = stream.read(Vec::with_capacity(8192)).await;
        match result {
            Ok(0) => return Err("connection closed before a response".to_string()),
            Ok(n) => {
                total += n;
                if total > RESPONSE_BYTES_MAX {
                    return Err("response too large".to_string());
                }
                buffer.extend_from_slice(&chunk);
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_encode_and_decode() {
        assert_eq!(request_message(""), vec![0, 0, 0, 0, 0]);
        assert_eq!(
            request_message("ab"),
            vec![0, 0, 0, 0, 4, 0x0a, 2, b'a', b'b']
        );
        assert_eq!(response_status(&[0x08, 0x01]).unwrap(), 1);
        assert_eq!(response_status(&[]).unwrap(), 0);
        assert!(response_status(&[0x08]).is_err());
        let mut long = Vec::new();
        hpack_int(&mut long, 0, 4, 100);
        assert_eq!(long, vec![0x0f, 85]);
        let headers = request_headers("h:1");
        assert_eq!(&headers[..2], &[0x83, 0x86]);
    }
}
