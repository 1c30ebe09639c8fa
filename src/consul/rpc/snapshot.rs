//! Snapshots on the wire: Consul's `SnapshotRequest{Datacenter, Token, AllowStale, Op}` and
//! `SnapshotResponse{Error, QueryMeta}` (`agent/structs/snapshot.go`), each with praetor's
//! `Archive` beside them — the gzip archive `/v1/snapshot` saves and restores.
//!
//! Consul sends these two as the header of a byte-5 (`RPCSnapshot`) connection and streams
//! the archive after them; praetor's servers answer them as the typed calls
//! `Snapshot.Save` and `Snapshot.Restore` (praetor's own, see `docs/decisions.md`,
//! *snapshots as typed calls*), the archive inside the body, so an archive crossing a typed
//! call is bounded by [`SNAPSHOT_CALL_BYTES_MAX`]. Pure: bytes in, values out.

use super::{each_field, read_reply, Fields, QueryMeta};
use crate::proto::msgpack::{Reader, WireError, Writer};

/// The largest archive one snapshot call carries, in bytes: one msgpack binary value of
/// Consul's RPC (`proto::msgpack_rpc::STRING_BYTES_MAX`).
pub const SNAPSHOT_CALL_BYTES_MAX: usize = crate::proto::msgpack_rpc::STRING_BYTES_MAX;

/// Consul's `SnapshotOp`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotOp {
    #[default]
    Save,
    Restore,
}

impl SnapshotOp {
    fn number(self) -> u64 {
        match self {
            SnapshotOp::Save => 0,
            SnapshotOp::Restore => 1,
        }
    }

    fn of(number: u64) -> Result<SnapshotOp, WireError> {
        match number {
            0 => Ok(SnapshotOp::Save),
            1 => Ok(SnapshotOp::Restore),
            _ => Err(WireError::Invalid("unknown snapshot Op")),
        }
    }
}

/// `SnapshotRequest`, with the archive to restore (empty for a save).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotRequest<'a> {
    pub allow_stale: bool,
    pub archive: &'a [u8],
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
                "Archive" => request.archive = r.bytes()?,
                "Datacenter" => request.datacenter = r.str()?,
                "Op" => request.op = SnapshotOp::of(r.u64("Op")?)?,
                "Token" => request.token = r.str()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_buf(Vec::with_capacity(self.archive.len() + 128));
        let mut f = Fields::new(&mut w, 5);
        f.field("AllowStale").bool(self.allow_stale);
        f.field("Archive").bytes(self.archive);
        f.field("Datacenter").str(self.datacenter);
        f.field("Op").uint(self.op.number());
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `SnapshotResponse` with the saved archive (empty for a restore); `Error` is empty, as a
/// failed call carries its error in net/rpc's answer instead.
pub fn encode_response(meta: &QueryMeta, archive: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_buf(Vec::with_capacity(archive.len() + 128));
    meta.write_reply(&mut w, &["Archive", "Error"], |name, w| match name {
        "Archive" => w.bytes(archive),
        _ => w.str(""),
    });
    w.into_inner()
}

/// Reads a `SnapshotResponse`: its metadata and the archive; a non-empty `Error` is
/// refused with its text.
pub fn decode_response(body: &[u8]) -> Result<(QueryMeta, &[u8]), String> {
    let mut archive: &[u8] = &[];
    let mut error = "";
    let meta = read_reply(body, |name, r| {
        match name {
            "Archive" => archive = r.bytes()?,
            "Error" => error = r.str()?,
            _ => return Ok(false),
        }
        Ok(true)
    })
    .map_err(|e| format!("rpc error: malformed reply: {e}"))?;
    if !error.is_empty() {
        return Err(error.to_string());
    }
    Ok((meta, archive))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_cross_whole() {
        let request = SnapshotRequest {
            allow_stale: true,
            archive: b"\x1f\x8b archive",
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
        let body = encode_response(&meta, b"gz");
        assert_eq!(decode_response(&body).unwrap(), (meta, &b"gz"[..]));
    }

    #[test]
    fn an_unknown_op_is_refused() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 1);
        f.field("Op").uint(7);
        f.finish();
        assert!(SnapshotRequest::decode(&w.into_inner()).is_err());
    }
}
