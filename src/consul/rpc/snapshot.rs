//! Snapshots on the wire: Consul's `SnapshotRequest{Datacenter, Token, AllowStale, Op}` and
//! `SnapshotResponse{Error, QueryMeta}` (`agent/structs/snapshot.go`), the two msgpack values
//! of a byte-5 (`RPCSnapshot`) connection. The archive is not in either: it streams after the
//! request (a restore, until the caller half-closes) or after the response (a save, until the
//! server closes), as Consul's `SnapshotRPC` and `handleSnapshotRequest` lay it out.
//!
//! An `Op` that is neither save nor restore decodes (Consul decodes any number) and is
//! refused when dispatched, in Consul's words ([`unrecognized_op`]). Pure: bytes in, values
//! out.

use super::{each_field, read_reply, Fields, QueryMeta};
use crate::proto::msgpack::{Reader, WireError, Writer};

/// The largest `SnapshotRequest` a server reads, in bytes: a datacenter name, a token and
/// two numbers, with room for fields a newer caller adds.
pub const SNAPSHOT_REQUEST_BYTES_MAX: usize = 64 * 1024;

/// Consul's `SnapshotOp`: 0 saves, 1 restores; any other number is carried as it came.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotOp {
    #[default]
    Save,
    Restore,
    Unknown(u64),
}

impl SnapshotOp {
    fn number(self) -> u64 {
        match self {
            SnapshotOp::Save => 0,
            SnapshotOp::Restore => 1,
            SnapshotOp::Unknown(number) => number,
        }
    }

    fn of(number: u64) -> SnapshotOp {
        match number {
            0 => SnapshotOp::Save,
            1 => SnapshotOp::Restore,
            other => SnapshotOp::Unknown(other),
        }
    }
}

/// Consul's answer to an `Op` it does not know: `unrecognized snapshot op %q`, Go's `%q`
/// of an integer being its quoted character literal.
pub fn unrecognized_op(number: u64) -> String {
    format!("unrecognized snapshot op {}", go_quoted_rune(number))
}

/// Go's `%q` of an integer (`strconv.QuoteRune`): the character in single quotes, escaped
/// when not printable; a value that is no character is U+FFFD.
fn go_quoted_rune(number: u64) -> String {
    let character = u32::try_from(number)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or('\u{fffd}');
    let inner = match character {
        '\x07' => "\\a".to_string(),
        '\x08' => "\\b".to_string(),
        '\x0c' => "\\f".to_string(),
        '\n' => "\\n".to_string(),
        '\r' => "\\r".to_string(),
        '\t' => "\\t".to_string(),
        '\x0b' => "\\v".to_string(),
        '\'' => "\\'".to_string(),
        '\\' => "\\\\".to_string(),
        c if (c as u32) < 0x20 || c as u32 == 0x7f => format!("\\x{:02x}", c as u32),
        c if c.is_control() && (c as u32) <= 0xffff => format!("\\u{:04x}", c as u32),
        c if c.is_control() => format!("\\U{:08x}", c as u32),
        c => c.to_string(),
    };
    format!("'{inner}'")
}

/// `SnapshotRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotRequest<'a> {
    pub allow_stale: bool,
    pub datacenter: &'a str,
    pub op: SnapshotOp,
    pub token: &'a str,
}

impl<'a> SnapshotRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<SnapshotRequest<'a>, WireError> {
        let mut request = SnapshotRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "AllowStale" => request.allow_stale = r.bool()?,
                "Datacenter" => request.datacenter = r.str()?,
                "Op" => request.op = SnapshotOp::of(r.u64("Op")?),
                "Token" => request.token = r.str()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_buf(Vec::with_capacity(128));
        let mut f = Fields::new(&mut w, 4);
        f.field("AllowStale").bool(self.allow_stale);
        f.field("Datacenter").str(self.datacenter);
        f.field("Op").uint(self.op.number());
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `SnapshotResponse`: `error` empty when the operation went ahead.
pub fn encode_response(meta: &QueryMeta, error: &str) -> Vec<u8> {
    let mut w = Writer::with_buf(Vec::with_capacity(128 + error.len()));
    meta.write_reply(&mut w, &["Error"], |_, w| w.str(error));
    w.into_inner()
}

/// Reads a `SnapshotResponse`: its metadata, or its non-empty `Error`'s text.
pub fn decode_response(body: &[u8]) -> Result<QueryMeta, String> {
    let mut error = "";
    let meta = read_reply(body, |name, r| {
        if name != "Error" {
            return Ok(false);
        }
        error = r.str()?;
        Ok(true)
    })
    .map_err(|e| format!("failed to decode response: {e}"))?;
    if !error.is_empty() {
        return Err(error.to_string());
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_cross_whole() {
        let request = SnapshotRequest {
            allow_stale: true,
            datacenter: "dc2",
            op: SnapshotOp::Restore,
            token: "t",
        };
        assert_eq!(SnapshotRequest::decode(&request.encode()).unwrap(), request);
        let meta = QueryMeta {
            index: 12,
            known_leader: true,
            consistency_level: "stale",
            ..QueryMeta::default()
        };
        assert_eq!(decode_response(&encode_response(&meta, "")).unwrap(), meta);
        assert_eq!(
            decode_response(&encode_response(&meta, "Permission denied")).unwrap_err(),
            "Permission denied"
        );
    }

    #[test]
    fn an_unknown_op_decodes_and_is_named_as_go_quotes_it() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 1);
        f.field("Op").uint(7);
        f.finish();
        let body = w.into_inner();
        let request = SnapshotRequest::decode(&body).unwrap();
        assert_eq!(request.op, SnapshotOp::Unknown(7));
        assert_eq!(unrecognized_op(7), "unrecognized snapshot op '\\a'");
        assert_eq!(unrecognized_op(2), "unrecognized snapshot op '\\x02'");
        assert_eq!(unrecognized_op(65), "unrecognized snapshot op 'A'");
        assert_eq!(
            unrecognized_op(1 << 40),
            "unrecognized snapshot op '\u{fffd}'"
        );
    }

    #[test]
    fn a_request_that_is_not_a_map_is_refused() {
        assert!(SnapshotRequest::decode(b"\x01").is_err());
        assert!(SnapshotRequest::decode(b"").is_err());
    }
}
