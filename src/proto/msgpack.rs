//! A small msgpack reader and writer that reproduces exactly what HashiCorp's
//! `go-msgpack` 0.5.5 `codec.MsgpackHandle{}` (the handle memberlist and serf use) puts on
//! the wire, and accepts everything a newer go-msgpack v2 peer may send. Consul's RPC codec
//! (`structs.MsgpackHandle`: the same codec, vendored in `consul-net-rpc`, with
//! `RawToString`) makes the same choices, so [`crate::proto::msgpack_rpc`] and the typed
//! calls of `crate::consul::rpc` use it too.
//!
//! Encoding rules of that handle, settled against its source (`codec/msgpack.go`,
//! `encode.go`, `helper.go`):
//! - `WriteExt` is false, so Go strings *and* `[]byte` are written with the old "raw" str
//!   family only: fixstr (< 32), str16, str32. str8 (0xd9) and the bin family are never
//!   written (the str8 length form is only used when `WriteExt` is set).
//! - Unsigned integers use the shortest form: positive fixint, uint8, uint16, uint32, uint64.
//!   Signed integers that are non-negative are written as unsigned; negative ones use
//!   negative fixint, int8, int16, int32 or int64.
//! - Structs are maps whose keys are the Go field names, written in *sorted* (byte-wise)
//!   order, not declaration order; `omitempty` fields with zero values are left out.
//! - A nil slice (including a nil `[]byte`) is msgpack nil (0xc0); an empty non-nil one is
//!   a zero-length container.
//!
//! The reader is meant for untrusted bytes: it never panics, never allocates more than the
//! input could justify (every count is checked against the bytes left), bounds nesting
//! depth, and reports truncation distinctly so that stream framing can ask for more bytes.

use std::fmt;

/// Deepest nesting of arrays/maps the reader accepts while skipping unknown values.
/// memberlist and serf messages nest at most four levels; 32 leaves room for additions
/// by newer peers while keeping recursion shallow.
pub const NESTING_DEPTH_MAX: usize = 32;

/// Errors for every way untrusted gossip bytes can be wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The input ended before the value did. Stream framing uses this to wait for more.
    Truncated,
    /// A msgpack marker of the wrong kind for the field being decoded.
    UnexpectedType { expected: &'static str, marker: u8 },
    /// An integer does not fit the field it is decoded into.
    IntegerOverflow { field: &'static str },
    /// A length or count is larger than the named limit.
    TooLarge { what: &'static str, limit: usize },
    /// Containers nest deeper than [`NESTING_DEPTH_MAX`].
    TooDeep,
    /// A string field holds bytes that are not UTF-8.
    InvalidUtf8,
    /// The leading message-type byte is not one this layer knows.
    UnknownMessageType(u8),
    /// Anything else, with a fixed explanation.
    Invalid(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => write!(f, "message truncated"),
            WireError::UnexpectedType { expected, marker } => {
                write!(
                    f,
                    "expected msgpack {expected}, found marker 0x{marker:02x}"
                )
            }
            WireError::IntegerOverflow { field } => write!(f, "integer out of range for {field}"),
            WireError::TooLarge { what, limit } => write!(f, "{what} exceeds limit of {limit}"),
            WireError::TooDeep => write!(f, "msgpack nesting deeper than {NESTING_DEPTH_MAX}"),
            WireError::InvalidUtf8 => write!(f, "string is not valid UTF-8"),
            WireError::UnknownMessageType(t) => write!(f, "unknown message type {t}"),
            WireError::Invalid(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for WireError {}

/// Appends msgpack values to a byte vector using go-msgpack 0.5.5's choices.
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }

    pub fn with_buf(buf: Vec<u8>) -> Self {
        Writer { buf }
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    pub fn nil(&mut self) {
        self.buf.push(0xc0);
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.push(if v { 0xc3 } else { 0xc2 });
    }

    /// Unsigned integer in the shortest form (go-msgpack `encodeUint`).
    pub fn uint(&mut self, v: u64) {
        if v <= 0x7f {
            self.buf.push(v as u8);
        } else if v <= u8::MAX as u64 {
            self.buf.extend_from_slice(&[0xcc, v as u8]);
        } else if v <= u16::MAX as u64 {
            self.buf.push(0xcd);
            self.buf.extend_from_slice(&(v as u16).to_be_bytes());
        } else if v <= u32::MAX as u64 {
            self.buf.push(0xce);
            self.buf.extend_from_slice(&(v as u32).to_be_bytes());
        } else {
            self.buf.push(0xcf);
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
    }

    /// Signed integer (go-msgpack `encodeInt`): non-negative values go through `uint`.
    pub fn int(&mut self, v: i64) {
        if v >= 0 {
            self.uint(v as u64);
        } else if v >= -32 {
            self.buf.push(v as i8 as u8);
        } else if v >= i8::MIN as i64 {
            self.buf.extend_from_slice(&[0xd0, v as i8 as u8]);
        } else if v >= i16::MIN as i64 {
            self.buf.push(0xd1);
            self.buf.extend_from_slice(&(v as i16).to_be_bytes());
        } else if v >= i32::MIN as i64 {
            self.buf.push(0xd2);
            self.buf.extend_from_slice(&(v as i32).to_be_bytes());
        } else {
            self.buf.push(0xd3);
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub fn f64(&mut self, v: f64) {
        self.buf.push(0xcb);
        self.buf.extend_from_slice(&v.to_bits().to_be_bytes());
    }

    fn str_header(&mut self, len: usize) {
        if len < 32 {
            self.buf.push(0xa0 | len as u8);
        } else if len <= u16::MAX as usize {
            self.buf.push(0xda);
            self.buf.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            self.buf.push(0xdb);
            self.buf.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }

    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// A Go `[]byte` (non-nil): written with the str family, as the 0.5.5 handle does.
    pub fn bytes(&mut self, b: &[u8]) {
        self.str_header(b.len());
        self.buf.extend_from_slice(b);
    }

    /// A Go `[]byte` that is nil when `None`.
    pub fn opt_bytes(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => self.bytes(b),
            None => self.nil(),
        }
    }

    pub fn array_len(&mut self, len: usize) {
        self.container_header(len, 0x90, 0xdc, 0xdd);
    }

    pub fn map_len(&mut self, len: usize) {
        self.container_header(len, 0x80, 0xde, 0xdf);
    }

    fn container_header(&mut self, len: usize, fix: u8, b16: u8, b32: u8) {
        if len < 16 {
            self.buf.push(fix | len as u8);
        } else if len <= u16::MAX as usize {
            self.buf.push(b16);
            self.buf.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            self.buf.push(b32);
            self.buf.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }
}

/// A cursor over untrusted msgpack bytes.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The unread tail.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn peek(&self) -> Result<u8, WireError> {
        self.buf.get(self.pos).copied().ok_or(WireError::Truncated)
    }

    fn byte(&mut self) -> Result<u8, WireError> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError::Truncated);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn be_u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn be_u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn be_u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// True (and consumes it) when the next value is nil.
    pub fn try_nil(&mut self) -> Result<bool, WireError> {
        if self.peek()? == 0xc0 {
            self.pos += 1;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Any msgpack integer as i128 so both signed and unsigned forms are exact; nil is 0,
    /// as go-msgpack decodes nil into a number.
    fn integer(&mut self) -> Result<i128, WireError> {
        let m = self.byte()?;
        Ok(match m {
            0x00..=0x7f => m as i128,
            0xe0..=0xff => (m as i8) as i128,
            0xc0 => 0,
            0xcc => self.byte()? as i128,
            0xcd => self.be_u16()? as i128,
            0xce => self.be_u32()? as i128,
            0xcf => self.be_u64()? as i128,
            0xd0 => (self.byte()? as i8) as i128,
            0xd1 => (self.be_u16()? as i16) as i128,
            0xd2 => (self.be_u32()? as i32) as i128,
            0xd3 => (self.be_u64()? as i64) as i128,
            _ => {
                return Err(WireError::UnexpectedType {
                    expected: "integer",
                    marker: m,
                });
            }
        })
    }

    pub fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        let v = self.integer()?;
        u64::try_from(v).map_err(|_| WireError::IntegerOverflow { field })
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32, WireError> {
        let v = self.integer()?;
        u32::try_from(v).map_err(|_| WireError::IntegerOverflow { field })
    }

    pub fn u16(&mut self, field: &'static str) -> Result<u16, WireError> {
        let v = self.integer()?;
        u16::try_from(v).map_err(|_| WireError::IntegerOverflow { field })
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        let v = self.integer()?;
        u8::try_from(v).map_err(|_| WireError::IntegerOverflow { field })
    }

    pub fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        let v = self.integer()?;
        i64::try_from(v).map_err(|_| WireError::IntegerOverflow { field })
    }

    pub fn bool(&mut self) -> Result<bool, WireError> {
        match self.byte()? {
            0xc2 | 0xc0 => Ok(false),
            0xc3 => Ok(true),
            m => Err(WireError::UnexpectedType {
                expected: "bool",
                marker: m,
            }),
        }
    }

    /// A float; go-msgpack writes float64 for Go `float64`, but float32 and integers are
    /// accepted so a peer's encoder choice cannot break decoding.
    pub fn f64(&mut self) -> Result<f64, WireError> {
        let m = self.peek()?;
        match m {
            0xcb => {
                self.pos += 1;
                Ok(f64::from_bits(self.be_u64()?))
            }
            0xca => {
                self.pos += 1;
                Ok(f32::from_bits(self.be_u32()?) as f64)
            }
            _ => Ok(self.integer()? as f64),
        }
    }

    /// A str or bin value (or nil, as empty). Returns a borrowed slice.
    pub fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let m = self.byte()?;
        let len = match m {
            0xa0..=0xbf => (m & 0x1f) as usize,
            0xd9 | 0xc4 => self.byte()? as usize,
            0xda | 0xc5 => self.be_u16()? as usize,
            0xdb | 0xc6 => self.be_u32()? as usize,
            0xc0 => 0,
            _ => {
                return Err(WireError::UnexpectedType {
                    expected: "string or bytes",
                    marker: m,
                })
            }
        };
        self.take(len)
    }

    /// Like [`Reader::bytes`] but keeps nil distinct from empty.
    pub fn opt_bytes(&mut self) -> Result<Option<&'a [u8]>, WireError> {
        if self.try_nil()? {
            return Ok(None);
        }
        self.bytes().map(Some)
    }

    pub fn str(&mut self) -> Result<&'a str, WireError> {
        let b = self.bytes()?;
        std::str::from_utf8(b).map_err(|_| WireError::InvalidUtf8)
    }

    /// An array header; nil is an empty array. The count is checked against the bytes
    /// left (every element takes at least one byte), so callers may pre-allocate it.
    pub fn array_len(&mut self) -> Result<usize, WireError> {
        let m = self.byte()?;
        let len = match m {
            0x90..=0x9f => (m & 0x0f) as usize,
            0xdc => self.be_u16()? as usize,
            0xdd => self.be_u32()? as usize,
            0xc0 => 0,
            _ => {
                return Err(WireError::UnexpectedType {
                    expected: "array",
                    marker: m,
                })
            }
        };
        if len > self.remaining() {
            return Err(WireError::Truncated);
        }
        Ok(len)
    }

    /// A map header; nil is an empty map. Checked like [`Reader::array_len`].
    pub fn map_len(&mut self) -> Result<usize, WireError> {
        let m = self.byte()?;
        let len = match m {
            0x80..=0x8f => (m & 0x0f) as usize,
            0xde => self.be_u16()? as usize,
            0xdf => self.be_u32()? as usize,
            0xc0 => 0,
            _ => {
                return Err(WireError::UnexpectedType {
                    expected: "map",
                    marker: m,
                })
            }
        };
        if len.saturating_mul(2) > self.remaining() {
            return Err(WireError::Truncated);
        }
        Ok(len)
    }

    /// Skips one value of any type, bounded by [`NESTING_DEPTH_MAX`].
    pub fn skip(&mut self) -> Result<(), WireError> {
        self.skip_at(0)
    }

    fn skip_at(&mut self, depth: usize) -> Result<(), WireError> {
        if depth > NESTING_DEPTH_MAX {
            return Err(WireError::TooDeep);
        }
        let m = self.peek()?;
        match m {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => {
                self.pos += 1;
            }
            0xcc | 0xd0 => {
                self.pos += 1;
                self.take(1)?;
            }
            0xcd | 0xd1 => {
                self.pos += 1;
                self.take(2)?;
            }
            0xce | 0xd2 | 0xca => {
                self.pos += 1;
                self.take(4)?;
            }
            0xcf | 0xd3 | 0xcb => {
                self.pos += 1;
                self.take(8)?;
            }
            0xa0..=0xbf | 0xd9 | 0xda | 0xdb | 0xc4 | 0xc5 | 0xc6 => {
                self.bytes()?;
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                let n = self.array_len()?;
                for _ in 0..n {
                    self.skip_at(depth + 1)?;
                }
            }
            0x80..=0x8f | 0xde | 0xdf => {
                let n = self.map_len()?;
                for _ in 0..n {
                    self.skip_at(depth + 1)?;
                    self.skip_at(depth + 1)?;
                }
            }
            0xd4 => self.skip_ext(1)?,
            0xd5 => self.skip_ext(2)?,
            0xd6 => self.skip_ext(4)?,
            0xd7 => self.skip_ext(8)?,
            0xd8 => self.skip_ext(16)?,
            0xc7 => {
                self.pos += 1;
                let n = self.byte()? as usize;
                self.take(n + 1)?;
            }
            0xc8 => {
                self.pos += 1;
                let n = self.be_u16()? as usize;
                self.take(n + 1)?;
            }
            0xc9 => {
                self.pos += 1;
                let n = self.be_u32()? as usize;
                self.take(n.saturating_add(1))?;
            }
            0xc1 => {
                return Err(WireError::UnexpectedType {
                    expected: "any value",
                    marker: m,
                })
            }
        }
        Ok(())
    }

    fn skip_ext(&mut self, data_len: usize) -> Result<(), WireError> {
        self.pos += 1;
        self.take(1 + data_len)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_use_go_shortest_forms() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0xcc, 0x80]),
            (255, &[0xcc, 0xff]),
            (256, &[0xcd, 0x01, 0x00]),
            (65536, &[0xce, 0x00, 0x01, 0x00, 0x00]),
            (-1, &[0xff]),
            (-32, &[0xe0]),
            (-33, &[0xd0, 0xdf]),
            (-129, &[0xd1, 0xff, 0x7f]),
        ];
        for (v, want) in cases {
            let mut w = Writer::new();
            w.int(*v);
            assert_eq!(w.buf, *want, "encoding {v}");
            assert_eq!(Reader::new(&w.buf).i64("v").unwrap(), *v);
        }
        let mut w = Writer::new();
        w.uint(u64::MAX);
        assert_eq!(w.buf[0], 0xcf);
        assert_eq!(Reader::new(&w.buf).u64("v").unwrap(), u64::MAX);
    }

    #[test]
    fn strings_never_use_str8_or_bin() {
        let mut w = Writer::new();
        w.str(&"x".repeat(31));
        assert_eq!(w.buf[0], 0xbf);
        let mut w = Writer::new();
        w.str(&"x".repeat(32));
        assert_eq!(&w.buf[..3], &[0xda, 0x00, 0x20]);
        let mut w = Writer::new();
        w.bytes(&[1, 2, 3]);
        assert_eq!(w.buf, vec![0xa3, 1, 2, 3]);
    }

    #[test]
    fn reader_accepts_bin_and_str8_from_newer_peers() {
        assert_eq!(Reader::new(&[0xc4, 2, 9, 8]).bytes().unwrap(), &[9, 8]);
        assert_eq!(Reader::new(&[0xd9, 1, b'a']).str().unwrap(), "a");
    }

    #[test]
    fn reader_rejects_counts_larger_than_input() {
        assert_eq!(
            Reader::new(&[0xdd, 0xff, 0xff, 0xff, 0xff]).array_len(),
            Err(WireError::Truncated)
        );
        assert_eq!(
            Reader::new(&[0xdf, 0xff, 0xff, 0xff, 0xff, 1]).map_len(),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn skip_bounds_depth() {
        let deep = vec![0x91u8; 1000];
        assert_eq!(Reader::new(&deep).skip(), Err(WireError::TooDeep));
    }

    #[test]
    fn integer_overflow_is_an_error() {
        assert_eq!(
            Reader::new(&[0xcd, 0x01, 0x00]).u8("x"),
            Err(WireError::IntegerOverflow { field: "x" })
        );
        assert_eq!(
            Reader::new(&[0xff]).u32("x"),
            Err(WireError::IntegerOverflow { field: "x" })
        );
    }
}
