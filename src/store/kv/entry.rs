//! One row of the `kvs` table (Consul's `DirEntry`) as packed bytes, and [`KvEntry`], a row
//! on its own in a single allocation.
//!
//! A million small keys made the row layout the largest cost of the KV store: a struct of
//! seven fields behind an `Arc`, the key in a second allocation, the value in a third and
//! that value's shared-buffer header in a fourth came to ~350 bytes of heap per 117-byte
//! entry. A packed row ([`pack`]) is, in order:
//!
//! - a tag byte saying which of the rarely set fields are present, and whether the value is
//!   kept outside the row;
//! - `CreateIndex`, `ModifyIndex` and the key's length as LEB128 varints (a Raft index
//!   under two million takes three bytes, not eight);
//! - `Flags`, `LockIndex` and the holder session, only when set (the tag says which);
//! - the slot of the value when it is kept outside;
//! - the key, then the value (unless outside), which runs to the end of the row.
//!
//! The table keeps rows back to back in the leaves of its tree (`rows.rs`); a [`KvEntry`]
//! (a transaction's result, a removed row) is one thin pointer to one allocation holding
//! the reference count, the outside value and a packed row. Values longer than
//! [`VALUE_INLINE_BYTES_MAX`] are kept outside, in a buffer of exactly their size: a 4 KiB
//! value inline would push its block into the allocator's next size class (5 KiB) and waste
//! a quarter of it.
//!
//! Invariants: rows are immutable once built (a write builds a new row); the key bytes are
//! valid UTF-8 (they are copied from a `&str`); the tag and the varints are written only by
//! [`pack`] and read back by [`unpack`], which asserts the layout ends exactly where the key
//! and value begin.

use serde::de::Deserializer;
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;
use triomphe::ThinArc;

/// Values up to this many bytes are stored inside the row; longer ones in an allocation of
/// exactly their size (see the module documentation).
pub const VALUE_INLINE_BYTES_MAX: usize = 512;

const TAG_FLAGS: u8 = 1;
const TAG_LOCK_INDEX: u8 = 2;
const TAG_SESSION: u8 = 4;
const TAG_OUTSIDE: u8 = 8;
const TAGS_KNOWN: u8 = TAG_FLAGS | TAG_LOCK_INDEX | TAG_SESSION | TAG_OUTSIDE;
/// Longest LEB128 encoding of a `u64`.
const VARINT_BYTES_MAX: usize = 10;

/// A value too long to sit inside its row. Boxed twice so that the row's header stays one
/// word (rows without one hold a null pointer) while the bytes keep their exact size.
type OutOfLineValue = Option<Box<Box<[u8]>>>;

/// One KV row. Cloning shares the allocation.
#[derive(Clone)]
pub struct KvEntry(ThinArc<OutOfLineValue, u8>);

/// The fields of a row, borrowed: what [`KvEntry::new`] packs and [`KvEntry::fields`]
/// unpacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvFields<'a> {
    pub key: &'a str,
    pub value: &'a [u8],
    pub flags: u64,
    pub session: Option<&'a str>,
    pub lock_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
}

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads a varint written by [`push_varint`] at `*at`, moving `*at` past it. The bytes are
/// ours, so a malformed varint is a broken invariant, not bad input.
fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    for shift in 0..VARINT_BYTES_MAX {
        let byte = bytes[*at];
        *at += 1;
        value |= u64::from(byte & 0x7f) << (7 * shift);
        if byte < 0x80 {
            return value;
        }
    }
    unreachable!("a row's varint is longer than a u64's");
}

/// Appends the packed row of `fields` to `out`. With `outside_slot` the value is left out
/// (it is kept elsewhere, in that slot) and the row says so.
pub(super) fn pack(fields: &KvFields<'_>, outside_slot: Option<u64>, out: &mut Vec<u8>) {
    let start = out.len();
    let mut tag = 0;
    if fields.flags != 0 {
        tag |= TAG_FLAGS;
    }
    if fields.lock_index != 0 {
        tag |= TAG_LOCK_INDEX;
    }
    if fields.session.is_some() {
        tag |= TAG_SESSION;
    }
    if outside_slot.is_some() {
        tag |= TAG_OUTSIDE;
    }
    out.push(tag);
    push_varint(out, fields.create_index);
    push_varint(out, fields.modify_index);
    push_varint(out, fields.key.len() as u64);
    if fields.flags != 0 {
        push_varint(out, fields.flags);
    }
    if fields.lock_index != 0 {
        push_varint(out, fields.lock_index);
    }
    if let Some(session) = fields.session {
        push_varint(out, session.len() as u64);
        out.extend_from_slice(session.as_bytes());
    }
    if let Some(slot) = outside_slot {
        push_varint(out, slot);
    }
    out.extend_from_slice(fields.key.as_bytes());
    if outside_slot.is_none() {
        out.extend_from_slice(fields.value);
    }
    debug_assert_eq!(
        unpack(&out[start..]),
        (
            KvFields {
                value: if outside_slot.is_some() {
                    &[]
                } else {
                    fields.value
                },
                ..*fields
            },
            outside_slot
        ),
        "a row reads back as it was written"
    );
}

/// Every field of a packed row, decoded in one pass, and the slot of its value when that is
/// kept outside (the value read is then empty).
pub(super) fn unpack(packed: &[u8]) -> (KvFields<'_>, Option<u64>) {
    let tag = packed[0];
    debug_assert_eq!(tag & !TAGS_KNOWN, 0, "unknown tag bits in a KV row");
    let mut at = 1;
    let create_index = read_varint(packed, &mut at);
    let modify_index = read_varint(packed, &mut at);
    let key_len = read_varint(packed, &mut at) as usize;
    let flags = if tag & TAG_FLAGS != 0 {
        read_varint(packed, &mut at)
    } else {
        0
    };
    let lock_index = if tag & TAG_LOCK_INDEX != 0 {
        read_varint(packed, &mut at)
    } else {
        0
    };
    let session = if tag & TAG_SESSION != 0 {
        let len = read_varint(packed, &mut at) as usize;
        let bytes = &packed[at..at + len];
        at += len;
        Some(utf8(bytes))
    } else {
        None
    };
    let slot = (tag & TAG_OUTSIDE != 0).then(|| read_varint(packed, &mut at));
    let key = utf8(&packed[at..at + key_len]);
    at += key_len;
    debug_assert!(
        slot.is_none() || at == packed.len(),
        "an outside value leaves no bytes"
    );
    let fields = KvFields {
        key,
        value: &packed[at..],
        flags,
        session,
        lock_index,
        create_index,
        modify_index,
    };
    (fields, slot)
}

impl KvEntry {
    pub fn new(fields: KvFields<'_>) -> KvEntry {
        let outside = fields.value.len() > VALUE_INLINE_BYTES_MAX;
        let session_bytes = fields.session.map_or(0, |s| s.len() + VARINT_BYTES_MAX);
        let mut packed = Vec::with_capacity(
            1 + 6 * VARINT_BYTES_MAX
                + session_bytes
                + fields.key.len()
                + if outside { 0 } else { fields.value.len() },
        );
        pack(&fields, outside.then_some(0), &mut packed);
        let value: OutOfLineValue = outside.then(|| Box::new(Box::from(fields.value)));
        KvEntry(ThinArc::from_header_and_slice(value, &packed))
    }

    /// Every field, decoded in one pass over the row's header.
    pub fn fields(&self) -> KvFields<'_> {
        let (mut fields, slot) = unpack(&self.0.slice);
        if slot.is_some() {
            fields.value = self
                .0
                .header
                .header
                .as_deref()
                .expect("a row with an outside value holds it");
        }
        fields
    }

    pub fn key(&self) -> &str {
        self.fields().key
    }

    pub fn value(&self) -> &[u8] {
        self.fields().value
    }

    pub fn flags(&self) -> u64 {
        self.fields().flags
    }

    pub fn session(&self) -> Option<&str> {
        self.fields().session
    }

    pub fn lock_index(&self) -> u64 {
        self.fields().lock_index
    }

    pub fn create_index(&self) -> u64 {
        self.fields().create_index
    }

    pub fn modify_index(&self) -> u64 {
        self.fields().modify_index
    }

    /// The same row with its value left out, as transactions report writes.
    pub fn without_value(&self) -> KvEntry {
        if self.value().is_empty() {
            return self.clone();
        }
        KvEntry::new(KvFields {
            value: &[],
            ..self.fields()
        })
    }

    /// Whether both are the same allocation (a row that was not rewritten).
    pub fn ptr_eq(a: &KvEntry, b: &KvEntry) -> bool {
        a.0.ptr() == b.0.ptr()
    }
}

/// The key and session bytes of a row were copied from `&str`s when it was built and are
/// never written again, so they are UTF-8; checking it on every read would cost a pass over
/// the key on every comparison of a map lookup.
fn utf8(bytes: &[u8]) -> &str {
    debug_assert!(std::str::from_utf8(bytes).is_ok(), "row strings are UTF-8");
    // SAFETY: see above: these bytes are a copy of a `&str`.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

impl PartialEq for KvEntry {
    fn eq(&self, other: &Self) -> bool {
        KvEntry::ptr_eq(self, other) || self.fields() == other.fields()
    }
}

impl Eq for KvEntry {}

impl fmt::Debug for KvEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_fields(self.fields(), f)
    }
}

/// A row's fields as `Debug` shows them.
pub(super) fn debug_fields(fields: KvFields<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.debug_struct("KvEntry")
        .field("key", &fields.key)
        .field("value", &bytes::Bytes::copy_from_slice(fields.value))
        .field("flags", &fields.flags)
        .field("session", &fields.session)
        .field("lock_index", &fields.lock_index)
        .field("create_index", &fields.create_index)
        .field("modify_index", &fields.modify_index)
        .finish()
}

/// A byte string serialized as msgpack `bin`, as `bytes::Bytes` is.
struct BinRef<'a>(&'a [u8]);

impl Serialize for BinRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// Serialized exactly as the struct of seven fields it replaced was, so snapshots written
/// before rows were packed read back unchanged (and the other way round).
impl Serialize for KvEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_fields(self.fields(), serializer)
    }
}

/// A row as the struct of seven fields rows were before they were packed.
pub(super) fn serialize_fields<S: Serializer>(
    fields: KvFields<'_>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut row = serializer.serialize_struct("KvEntry", 7)?;
    row.serialize_field("key", fields.key)?;
    row.serialize_field("value", &BinRef(fields.value))?;
    row.serialize_field("flags", &fields.flags)?;
    row.serialize_field("session", &fields.session)?;
    row.serialize_field("lock_index", &fields.lock_index)?;
    row.serialize_field("create_index", &fields.create_index)?;
    row.serialize_field("modify_index", &fields.modify_index)?;
    row.end()
}

/// The serialized form: the struct of seven fields rows used to be.
#[derive(Deserialize)]
#[serde(rename = "KvEntry")]
struct KvEntryWire {
    key: String,
    value: bytes::Bytes,
    flags: u64,
    session: Option<String>,
    lock_index: u64,
    create_index: u64,
    modify_index: u64,
}

impl<'de> Deserialize<'de> for KvEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = KvEntryWire::deserialize(deserializer)?;
        Ok(KvEntry::new(KvFields {
            key: &wire.key,
            value: &wire.value,
            flags: wire.flags,
            session: wire.session.as_deref(),
            lock_index: wire.lock_index,
            create_index: wire.create_index,
            modify_index: wire.modify_index,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(key: &'a str, value: &'a [u8]) -> KvFields<'a> {
        KvFields {
            key,
            value,
            flags: 0,
            session: None,
            lock_index: 0,
            create_index: 0,
            modify_index: 0,
        }
    }

    #[test]
    fn every_field_reads_back_at_every_size() {
        let long_value = vec![7u8; VALUE_INLINE_BYTES_MAX + 1];
        let edge_value = vec![9u8; VALUE_INLINE_BYTES_MAX];
        let values: [&[u8]; 4] = [b"", b"v", &edge_value, &long_value];
        let integers = [0, 1, 127, 128, 16_383, 16_384, u64::MAX];
        for value in values {
            for (i, integer) in integers.iter().enumerate() {
                let session = ["", "0b5c0b5e-6cd6-4c3a-9d8a-3f1b7c2e9a11"][i % 2];
                let written = KvFields {
                    key: "a/ключ",
                    value,
                    flags: *integer,
                    session: (i % 3 != 0).then_some(session),
                    lock_index: integers[(i + 1) % integers.len()],
                    create_index: integers[(i + 2) % integers.len()],
                    modify_index: *integer,
                };
                let entry = KvEntry::new(written);
                assert_eq!(entry.fields(), written);
                assert_eq!(entry.key(), "a/ключ");
                assert_eq!(entry.value(), value);
                assert_eq!(entry.modify_index(), *integer);
                let copy = KvEntry::new(entry.fields());
                assert_eq!(copy, entry);
                assert!(!KvEntry::ptr_eq(&copy, &entry));
            }
        }
    }

    #[test]
    fn only_long_values_leave_the_row() {
        let short = KvEntry::new(fields("k", &[1; VALUE_INLINE_BYTES_MAX]));
        assert!(short.0.header.header.is_none());
        // tag, three one-byte varints, the key, the value: nothing else is stored inline.
        assert_eq!(short.0.slice.len(), 1 + 3 + 1 + VALUE_INLINE_BYTES_MAX);
        let long = KvEntry::new(fields("k", &[1; VALUE_INLINE_BYTES_MAX + 1]));
        // tag, three one-byte varints, the slot, the key.
        assert_eq!(long.0.slice.len(), 1 + 3 + 1 + 1);
        assert_eq!(
            long.0.header.header.as_deref().map(|v| v.len()),
            Some(VALUE_INLINE_BYTES_MAX + 1)
        );
    }

    #[test]
    fn without_value_keeps_everything_else() {
        let entry = KvEntry::new(KvFields {
            flags: 3,
            session: Some("s"),
            lock_index: 2,
            create_index: 5,
            modify_index: 9,
            ..fields("k", b"value")
        });
        let blank = entry.without_value();
        assert_eq!(
            blank.fields(),
            KvFields {
                value: b"",
                ..entry.fields()
            }
        );
        let empty = KvEntry::new(fields("k", b""));
        assert!(KvEntry::ptr_eq(&empty.without_value(), &empty));
    }

    /// The struct rows were before they were packed, with serde's derived layout.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    #[serde(rename = "KvEntry")]
    struct Unpacked {
        key: std::sync::Arc<str>,
        value: bytes::Bytes,
        flags: u64,
        session: Option<std::sync::Arc<str>>,
        lock_index: u64,
        create_index: u64,
        modify_index: u64,
    }

    #[test]
    fn serialized_exactly_as_the_unpacked_struct() {
        for session in [None, Some("s1")] {
            let unpacked = Unpacked {
                key: "a/b".into(),
                value: bytes::Bytes::from_static(b"\x00\xffv"),
                flags: 42,
                session: session.map(Into::into),
                lock_index: 3,
                create_index: 7,
                modify_index: 1 << 40,
            };
            let packed = KvEntry::new(KvFields {
                key: "a/b",
                value: b"\x00\xffv",
                flags: 42,
                session,
                lock_index: 3,
                create_index: 7,
                modify_index: 1 << 40,
            });
            let old_bytes = rmp_serde::to_vec(&unpacked).unwrap();
            assert_eq!(rmp_serde::to_vec(&packed).unwrap(), old_bytes);
            assert_eq!(
                rmp_serde::from_slice::<KvEntry>(&old_bytes).unwrap(),
                packed
            );
            let named = rmp_serde::to_vec_named(&unpacked).unwrap();
            assert_eq!(rmp_serde::to_vec_named(&packed).unwrap(), named);
            assert_eq!(rmp_serde::from_slice::<KvEntry>(&named).unwrap(), packed);
        }
    }
}
