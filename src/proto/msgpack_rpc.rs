//! Consul's RPC codec: Go's `net/rpc` over msgpack, as `hashicorp/net-rpc-msgpackrpc` writes
//! it (Consul vendors both in `consul-net-rpc`) with Consul's `structs.MsgpackHandle`.
//!
//! A connection (byte 0 on the server port, or one yamux stream) carries a sequence of
//! msgpack values with no framing of their own: each call is a header value followed by a
//! body value, each answer likewise.
//! - request header: Go's `rpc.Request`, a map `{ServiceMethod: string, Seq: uint64}`;
//! - response header: `rpc.Response`, a map `{Error: string, Seq, ServiceMethod}`, whose
//!   `Error` is empty on success; on failure the body is an empty map (net/rpc sends
//!   `struct{}{}` in place of the reply).
//!
//! Header maps are written with their keys sorted, as go-msgpack writes every struct (see
//! [`crate::proto::msgpack`]); readers accept any order and skip unknown keys.
//!
//! Since msgpack values delimit themselves, finding where one message ends means reading
//! its structure. [`Scanner`] does that resumably: bytes that arrive in pieces are looked at
//! once, however the message is cut, so a large call costs one pass over its bytes.
//! Decoding is in place: [`decode_request`] returns the method name borrowed from the
//! receive buffer and the body's position in it, for the typed decoders to read without
//! copying.
//!
//! Limits, checked before anything is buffered for them: [`MESSAGE_BYTES_MAX`] per header
//! or body value, [`STRING_BYTES_MAX`] per string or binary, [`CONTAINER_ENTRIES_MAX`] per
//! map or array, [`NESTING_DEPTH_MAX`] levels of nesting.

use super::msgpack::{Reader, WireError, Writer};
use bytes::{Bytes, BytesMut};

/// Largest header or body value: a KV value (512 KiB by Consul's default limit) or a
/// catalog registration with its checks fits with room to spare; a transaction of many
/// operations too.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;
/// Largest string or binary value inside a message.
pub const STRING_BYTES_MAX: usize = 8 << 20;
/// Most entries of one map or array (a map's entry is a key and a value).
pub const CONTAINER_ENTRIES_MAX: usize = 1 << 20;
/// Deepest nesting of maps and arrays. Consul's request structs nest a handful of levels
/// (a registration's check definition's header lists); free-form config maps a few more.
pub const NESTING_DEPTH_MAX: usize = 32;
/// Longest `ServiceMethod` ("Catalog.ListServices" and its kind are a few dozen bytes).
pub const METHOD_BYTES_MAX: usize = 256;

/// Why a stream of calls cannot be read further; the connection (or stream) is closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// A value would exceed a limit; names the limit and its size.
    TooLarge { what: &'static str, limit: usize },
    /// Maps and arrays nest deeper than [`NESTING_DEPTH_MAX`].
    TooDeep,
    /// A byte that starts no msgpack value (0xc1).
    InvalidMarker(u8),
    /// A header that is not Go's `rpc.Request` / `rpc.Response`.
    BadHeader(String),
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodecError::TooLarge { what, limit } => write!(f, "{what} exceeds {limit}"),
            CodecError::TooDeep => write!(f, "msgpack nesting deeper than {NESTING_DEPTH_MAX}"),
            CodecError::InvalidMarker(m) => write!(f, "invalid msgpack marker 0x{m:02x}"),
            CodecError::BadHeader(why) => write!(f, "bad rpc header: {why}"),
        }
    }
}

impl std::error::Error for CodecError {}

/// Finds where one msgpack value ends in a buffer that grows at its end, resuming where it
/// stopped: each byte is examined once however the value arrives.
#[derive(Clone, Debug, Default)]
pub struct Scanner {
    /// Offset of the next element's first byte.
    position: usize,
    /// Elements still to read in each open container, innermost last.
    open: Vec<usize>,
    /// Whether the top-level value's first element has been read.
    started: bool,
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner::default()
    }

    /// Scans `buffer` (which starts where the value starts and has only grown since the
    /// last call): the value's length once all of it is there, `None` while more is needed.
    pub fn advance(&mut self, buffer: &[u8]) -> Result<Option<usize>, CodecError> {
        debug_assert!(self.position <= buffer.len(), "the buffer only grows");
        loop {
            if self.started && self.open.is_empty() {
                return Ok(Some(self.position));
            }
            let Some(element) = element_at(&buffer[self.position..])? else {
                return Ok(None);
            };
            let end = self.position + element.length;
            if end > MESSAGE_BYTES_MAX {
                return Err(CodecError::TooLarge {
                    what: "message",
                    limit: MESSAGE_BYTES_MAX,
                });
            }
            if end > buffer.len() {
                return Ok(None);
            }
            self.position = end;
            self.started = true;
            // The element fills one slot of its container; a container opened by it adds
            // its own slots, closed at once when it is empty.
            if let Some(remaining) = self.open.last_mut() {
                *remaining -= 1;
            }
            if element.children > 0 {
                if self.open.len() >= NESTING_DEPTH_MAX {
                    return Err(CodecError::TooDeep);
                }
                self.open.push(element.children);
            }
            while self.open.last() == Some(&0) {
                self.open.pop();
            }
        }
    }
}

/// One element's header: the bytes it takes up itself (header and, for strings, binaries
/// and extensions, its payload) and the elements it contains.
struct Element {
    length: usize,
    children: usize,
}

/// Reads the element starting at `bytes[0]`; `None` when its header is incomplete.
fn element_at(bytes: &[u8]) -> Result<Option<Element>, CodecError> {
    let Some(&marker) = bytes.first() else {
        return Ok(None);
    };
    let size = |n: usize| -> Option<usize> {
        let b = bytes.get(1..1 + n)?;
        Some(
            b.iter()
                .fold(0usize, |acc, byte| (acc << 8) | *byte as usize),
        )
    };
    let fixed = |length: usize| {
        Ok(Some(Element {
            length,
            children: 0,
        }))
    };
    let payload = |header: usize, length: Option<usize>| -> Result<Option<Element>, CodecError> {
        let Some(length) = length else {
            return Ok(None);
        };
        if length > STRING_BYTES_MAX {
            return Err(CodecError::TooLarge {
                what: "string",
                limit: STRING_BYTES_MAX,
            });
        }
        Ok(Some(Element {
            length: header + length,
            children: 0,
        }))
    };
    let container = |header: usize,
                     count: Option<usize>,
                     per_entry: usize|
     -> Result<Option<Element>, CodecError> {
        let Some(count) = count else {
            return Ok(None);
        };
        if count > CONTAINER_ENTRIES_MAX {
            return Err(CodecError::TooLarge {
                what: "map or array",
                limit: CONTAINER_ENTRIES_MAX,
            });
        }
        Ok(Some(Element {
            length: header,
            children: count * per_entry,
        }))
    };
    match marker {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => fixed(1),
        0xcc | 0xd0 => fixed(2),
        0xcd | 0xd1 => fixed(3),
        0xce | 0xd2 | 0xca => fixed(5),
        0xcf | 0xd3 | 0xcb => fixed(9),
        0xa0..=0xbf => payload(1, Some((marker & 0x1f) as usize)),
        0xd9 | 0xc4 => payload(2, size(1)),
        0xda | 0xc5 => payload(3, size(2)),
        0xdb | 0xc6 => payload(5, size(4)),
        // Extensions: a type byte after the length, then the payload.
        0xd4 => fixed(3),
        0xd5 => fixed(4),
        0xd6 => fixed(6),
        0xd7 => fixed(10),
        0xd8 => fixed(18),
        0xc7 => payload(3, size(1)),
        0xc8 => payload(4, size(2)),
        0xc9 => payload(6, size(4)),
        0x90..=0x9f => container(1, Some((marker & 0x0f) as usize), 1),
        0xdc => container(3, size(2), 1),
        0xdd => container(5, size(4), 1),
        0x80..=0x8f => container(1, Some((marker & 0x0f) as usize), 2),
        0xde => container(3, size(2), 2),
        0xdf => container(5, size(4), 2),
        0xc1 => Err(CodecError::InvalidMarker(marker)),
    }
}

/// One call's header, borrowed from the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader<'a> {
    /// `Service.Method`, e.g. `KVS.Get`.
    pub method: &'a str,
    pub seq: u64,
}

/// One answer's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHeader<'a> {
    pub method: &'a str,
    pub seq: u64,
    /// Empty on success.
    pub error: &'a str,
}

/// Reads a call out of a stream: the header, then the body.
#[derive(Clone, Debug, Default)]
pub struct MessageReader {
    header: Scanner,
    /// The header's length once it is complete; then the body is being scanned.
    header_length: Option<usize>,
    body: Scanner,
}

/// Where a complete message's two values lie in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageExtent {
    pub header_length: usize,
    pub body_length: usize,
}

impl MessageExtent {
    pub fn total(&self) -> usize {
        self.header_length + self.body_length
    }
}

impl MessageReader {
    pub fn new() -> MessageReader {
        MessageReader::default()
    }

    /// Scans `buffer` (which starts where the message starts and has only grown since the
    /// last call). Once a whole message is there, returns its extent and resets, ready for
    /// the message that starts right after it.
    pub fn advance(&mut self, buffer: &[u8]) -> Result<Option<MessageExtent>, CodecError> {
        let header_length = match self.header_length {
            Some(length) => length,
            None => match self.header.advance(buffer)? {
                Some(length) => {
                    self.header_length = Some(length);
                    length
                }
                None => return Ok(None),
            },
        };
        let Some(body_length) = self.body.advance(&buffer[header_length..])? else {
            return Ok(None);
        };
        *self = MessageReader::default();
        Ok(Some(MessageExtent {
            header_length,
            body_length,
        }))
    }
}

/// The messages of one codec whose bytes arrive in pieces (yamux frames, socket reads),
/// each handed out whole as one [`Bytes`] with where its header ends. While nothing is
/// buffered, a message wholly inside one piece is a slice of that piece, never copied;
/// only a message that spans pieces is gathered into a buffer of its own. Either way the
/// scanner looks at each byte once.
#[derive(Debug, Default)]
pub struct MessageAssembler {
    /// The unread tail of the last piece, kept as the piece's own bytes while nothing else
    /// is buffered.
    frozen: Bytes,
    /// Bytes of a message that spans pieces, copied together.
    buffer: BytesMut,
    scanner: MessageReader,
}

impl MessageAssembler {
    /// Adds the next piece of the stream.
    pub fn push(&mut self, piece: Bytes) {
        debug_assert!(self.frozen.is_empty() || self.buffer.is_empty());
        if self.frozen.is_empty() && self.buffer.is_empty() {
            self.frozen = piece;
            return;
        }
        if !self.frozen.is_empty() {
            // A message spans pieces: from here on its bytes are gathered in one buffer
            // (the scanner's position stays valid, the bytes keep their order).
            self.buffer
                .extend_from_slice(&std::mem::take(&mut self.frozen));
        }
        self.buffer.extend_from_slice(&piece);
    }

    /// The next whole message and the length of its header; `None` until one is there.
    pub fn next_message(&mut self) -> Result<Option<(Bytes, usize)>, CodecError> {
        let frozen = !self.frozen.is_empty();
        let found = if frozen {
            self.scanner.advance(&self.frozen)
        } else {
            self.scanner.advance(&self.buffer)
        };
        let Some(extent) = found? else {
            return Ok(None);
        };
        let message = if frozen {
            self.frozen.split_to(extent.total())
        } else {
            self.buffer.split_to(extent.total()).freeze()
        };
        Ok(Some((message, extent.header_length)))
    }

    /// No unread bytes are held.
    pub fn is_empty(&self) -> bool {
        self.frozen.is_empty() && self.buffer.is_empty()
    }
}

fn header_error(error: WireError) -> CodecError {
    CodecError::BadHeader(error.to_string())
}

/// Decodes a request header (a complete value, as [`MessageReader`] found it).
pub fn decode_request_header(bytes: &[u8]) -> Result<RequestHeader<'_>, CodecError> {
    let mut reader = Reader::new(bytes);
    let entries = reader.map_len().map_err(header_error)?;
    let mut method = None;
    let mut seq = 0;
    for _ in 0..entries {
        match reader.str().map_err(header_error)? {
            "ServiceMethod" => method = Some(reader.str().map_err(header_error)?),
            "Seq" => seq = reader.u64("Seq").map_err(header_error)?,
            _ => reader.skip().map_err(header_error)?,
        }
    }
    let method = method.ok_or_else(|| CodecError::BadHeader("no ServiceMethod".into()))?;
    if method.len() > METHOD_BYTES_MAX {
        return Err(CodecError::TooLarge {
            what: "ServiceMethod",
            limit: METHOD_BYTES_MAX,
        });
    }
    Ok(RequestHeader { method, seq })
}

/// Decodes a response header.
pub fn decode_response_header(bytes: &[u8]) -> Result<ResponseHeader<'_>, CodecError> {
    let mut reader = Reader::new(bytes);
    let entries = reader.map_len().map_err(header_error)?;
    let mut header = ResponseHeader {
        method: "",
        seq: 0,
        error: "",
    };
    for _ in 0..entries {
        match reader.str().map_err(header_error)? {
            "ServiceMethod" => header.method = reader.str().map_err(header_error)?,
            "Seq" => header.seq = reader.u64("Seq").map_err(header_error)?,
            "Error" => header.error = reader.str().map_err(header_error)?,
            _ => reader.skip().map_err(header_error)?,
        }
    }
    Ok(header)
}

/// Appends a request: its header, then `body` (one msgpack value, already encoded).
pub fn encode_request(out: &mut Vec<u8>, method: &str, seq: u64, body: &[u8]) {
    let mut w = Writer::with_buf(std::mem::take(out));
    w.map_len(2);
    w.str("Seq");
    w.uint(seq);
    w.str("ServiceMethod");
    w.str(method);
    w.raw(body);
    *out = w.into_inner();
}

/// The body net/rpc sends with an error: its empty `struct{}{}`.
pub const EMPTY_BODY: &[u8] = &[0x80];

/// Appends an answer: its header, then `body`; an error answer's body is [`EMPTY_BODY`]
/// whatever `body` holds, as net/rpc sends.
pub fn encode_response(out: &mut Vec<u8>, method: &str, seq: u64, error: &str, body: &[u8]) {
    let mut w = Writer::with_buf(std::mem::take(out));
    w.map_len(3);
    w.str("Error");
    w.str(error);
    w.str("Seq");
    w.uint(seq);
    w.str("ServiceMethod");
    w.str(method);
    w.raw(if error.is_empty() { body } else { EMPTY_BODY });
    *out = w.into_inner();
}

/// net/rpc's answer to a method name without a dot, an unknown service and an unknown
/// method (`rpc: service/method request ill-formed: …`, `rpc: can't find service …`,
/// `rpc: can't find method …`), given the services a server knows.
pub fn unknown_method_error(method: &str, is_service: impl Fn(&str) -> bool) -> String {
    match method.rfind('.') {
        None => format!("rpc: service/method request ill-formed: {method}"),
        Some(dot) if !is_service(&method[..dot]) => format!("rpc: can't find service {method}"),
        Some(_) => format!("rpc: can't find method {method}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, seq: u64, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_request(&mut out, method, seq, body);
        out
    }

    #[test]
    fn an_assembler_hands_out_messages_however_they_are_cut() {
        let mut wire = request("Status.Ping", 1, &[0xc0]);
        wire.extend_from_slice(&request("Status.Leader", 2, &[0x80]));
        let wire = Bytes::from(wire);
        for cut in 0..wire.len() {
            let mut assembler = MessageAssembler::default();
            assembler.push(wire.slice(..cut));
            assembler.push(wire.slice(cut..));
            let mut seen = Vec::new();
            while let Some((message, header_length)) = assembler.next_message().unwrap() {
                let header = decode_request_header(&message[..header_length]).unwrap();
                seen.push((header.method.to_string(), message.len() - header_length));
            }
            assert_eq!(
                seen,
                vec![
                    ("Status.Ping".to_string(), 1),
                    ("Status.Leader".to_string(), 1)
                ],
                "cut at {cut}"
            );
            assert!(assembler.is_empty(), "cut at {cut}");
        }
        // A message inside one piece is a slice of that piece.
        let mut assembler = MessageAssembler::default();
        assembler.push(wire.clone());
        let (message, _) = assembler.next_message().unwrap().unwrap();
        assert_eq!(
            message.as_ptr(),
            wire.as_ptr(),
            "served from the piece's own bytes"
        );
        assert!(!assembler.is_empty(), "the second message is still held");
        // Garbage is an error, not a message.
        let mut assembler = MessageAssembler::default();
        assembler.push(Bytes::from_static(&[0xc1]));
        assert!(assembler.next_message().is_err());
    }

    /// A body with nesting, a long string and an extension, as a client might send.
    fn body() -> Vec<u8> {
        let mut w = Writer::new();
        w.map_len(3);
        w.str("Key");
        w.str(&"k".repeat(300));
        w.str("List");
        w.array_len(2);
        w.map_len(1);
        w.str("A");
        w.int(-5);
        w.nil();
        w.str("When");
        w.raw(&[0xd6, 0xff, 0, 0, 0, 1]);
        w.into_inner()
    }

    #[test]
    fn messages_are_found_however_the_bytes_are_cut() {
        let mut wire = request("KVS.Get", 7, &body());
        wire.extend(request("Status.Ping", 8, &[0xc0]));
        let first_length = request("KVS.Get", 7, &body()).len();
        for cut in 0..wire.len() {
            let mut reader = MessageReader::new();
            let mut found = reader.advance(&wire[..cut]).unwrap();
            if found.is_none() {
                found = reader.advance(&wire).unwrap();
            }
            let extent = found.expect("a whole message is there");
            assert_eq!(extent.total(), first_length, "cut at {cut}");
            let header = decode_request_header(&wire[..extent.header_length]).unwrap();
            assert_eq!((header.method, header.seq), ("KVS.Get", 7));
            assert_eq!(
                &wire[extent.header_length..extent.total()],
                &body()[..],
                "cut at {cut}"
            );
            let rest = &wire[extent.total()..];
            let second = reader.advance(rest).unwrap().expect("the second message");
            let header = decode_request_header(&rest[..second.header_length]).unwrap();
            assert_eq!((header.method, header.seq), ("Status.Ping", 8));
            assert_eq!(second.body_length, 1);
        }
    }

    #[test]
    fn byte_by_byte_arrival_finds_the_message() {
        let wire = request("Catalog.Register", u64::MAX, &body());
        let mut reader = MessageReader::new();
        let mut extent = None;
        for end in 0..=wire.len() {
            if let Some(found) = reader.advance(&wire[..end]).unwrap() {
                assert_eq!(end, wire.len(), "found only when complete");
                extent = Some(found);
            }
        }
        assert_eq!(extent.unwrap().total(), wire.len());
    }

    #[test]
    fn limits_refuse_before_buffering() {
        // A string claiming more than the limit is refused from its header alone.
        let mut wire = vec![0x81, 0xa1, b'K', 0xdb];
        wire.extend(((STRING_BYTES_MAX + 1) as u32).to_be_bytes());
        assert_eq!(
            Scanner::new().advance(&wire),
            Err(CodecError::TooLarge {
                what: "string",
                limit: STRING_BYTES_MAX
            })
        );
        let mut wire = vec![0xdd];
        wire.extend(((CONTAINER_ENTRIES_MAX + 1) as u32).to_be_bytes());
        assert!(matches!(
            Scanner::new().advance(&wire),
            Err(CodecError::TooLarge { .. })
        ));
        let deep = vec![0x91u8; NESTING_DEPTH_MAX + 2];
        assert_eq!(Scanner::new().advance(&deep), Err(CodecError::TooDeep));
        let shallow = {
            let mut v = vec![0x91u8; NESTING_DEPTH_MAX];
            v.push(0xc0);
            v
        };
        assert_eq!(Scanner::new().advance(&shallow), Ok(Some(shallow.len())));
        assert_eq!(
            Scanner::new().advance(&[0xc1]),
            Err(CodecError::InvalidMarker(0xc1))
        );
        // Many strings adding up past the message limit.
        let mut wire = vec![0xdd, 0, 0, 0, 16];
        for _ in 0..16 {
            wire.push(0xdb);
            wire.extend(((STRING_BYTES_MAX / 4) as u32).to_be_bytes());
            wire.resize(wire.len() + STRING_BYTES_MAX / 4, 0);
        }
        assert!(matches!(
            Scanner::new().advance(&wire),
            Err(CodecError::TooLarge {
                what: "message",
                ..
            })
        ));
    }

    #[test]
    fn empty_containers_close_at_once() {
        assert_eq!(Scanner::new().advance(&[0x80]), Ok(Some(1)));
        assert_eq!(Scanner::new().advance(&[0x92, 0x90, 0x80]), Ok(Some(3)));
        assert_eq!(Scanner::new().advance(&[0x92, 0x90]), Ok(None));
    }

    #[test]
    fn headers_round_trip_and_accept_any_key_order() {
        let wire = request("Health.ServiceNodes", 300, &[0x80]);
        let mut reader = MessageReader::new();
        let extent = reader.advance(&wire).unwrap().unwrap();
        let header = decode_request_header(&wire[..extent.header_length]).unwrap();
        assert_eq!(header.method, "Health.ServiceNodes");
        assert_eq!(header.seq, 300);
        // Keys in another order, an unknown key, the method as bin.
        let mut w = Writer::new();
        w.map_len(3);
        w.str("Extra");
        w.array_len(1);
        w.bool(true);
        w.str("ServiceMethod");
        w.raw(&[0xc4, 3, b'A', b'.', b'B']);
        w.str("Seq");
        w.uint(1);
        let header = decode_request_header(&w.buf).unwrap();
        assert_eq!((header.method, header.seq), ("A.B", 1));
        assert!(decode_request_header(&[0x80]).is_err(), "no method");
        assert!(decode_request_header(&[0x91, 0x01]).is_err(), "not a map");

        let mut out = Vec::new();
        encode_response(&mut out, "KVS.Get", 9, "", &[0x81, 0xa1, b'A', 1]);
        let extent = MessageReader::new().advance(&out).unwrap().unwrap();
        let header = decode_response_header(&out[..extent.header_length]).unwrap();
        assert_eq!(
            (header.method, header.seq, header.error),
            ("KVS.Get", 9, "")
        );
        assert_eq!(&out[extent.header_length..], &[0x81, 0xa1, b'A', 1]);
        let mut out = Vec::new();
        encode_response(&mut out, "X.Y", 1, "rpc: can't find service X.Y", b"\xc0");
        let extent = MessageReader::new().advance(&out).unwrap().unwrap();
        assert_eq!(&out[extent.header_length..], EMPTY_BODY);
    }

    #[test]
    fn unknown_methods_get_net_rpc_words() {
        let known = |service: &str| service == "KVS";
        assert_eq!(
            unknown_method_error("Nope", known),
            "rpc: service/method request ill-formed: Nope"
        );
        assert_eq!(
            unknown_method_error("Foo.Bar", known),
            "rpc: can't find service Foo.Bar"
        );
        assert_eq!(
            unknown_method_error("KVS.Frob", known),
            "rpc: can't find method KVS.Frob"
        );
    }
}
