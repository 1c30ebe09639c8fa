//! The KV store's calls: `KVS.Get` and `KVS.List` (`KeyRequest`), `KVS.ListKeys`
//! (`KeyListRequest`), `KVS.Apply` (`KVSRequest` with a `DirEntry`), and their replies
//! `IndexedDirEntries` and `IndexedKeyList`.

use super::{each_field, read_reply, write_request_field, Fields, QueryMeta, QueryOptions};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::kv::{KvFields, KvOp};
use bytes::Bytes;

/// `KeyRequest`: one key, or a prefix for `KVS.List`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRequest<'a> {
    pub datacenter: &'a str,
    pub key: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> KeyRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<KeyRequest<'a>, WireError> {
        let mut request = KeyRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Key" => request.key = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }
}

/// `KeyListRequest`: the keys under a prefix, cut at a separator (Consul spells the field
/// `Seperator`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyListRequest<'a> {
    pub datacenter: &'a str,
    pub prefix: &'a str,
    pub separator: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> KeyListRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<KeyListRequest<'a>, WireError> {
        let mut request = KeyListRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Prefix" => request.prefix = r.str()?,
                "Seperator" => request.separator = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }
}

/// `DirEntry` as a request carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirEntry<'a> {
    pub key: &'a str,
    pub value: &'a [u8],
    pub flags: u64,
    pub session: &'a str,
    pub lock_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
}

impl<'a> DirEntry<'a> {
    /// The entry as the store's borrowed fields (an empty session is none).
    pub fn fields(&self) -> KvFields<'a> {
        KvFields {
            key: self.key,
            value: self.value,
            flags: self.flags,
            session: (!self.session.is_empty()).then_some(self.session),
            lock_index: self.lock_index,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }

    pub fn read(r: &mut Reader<'a>) -> Result<DirEntry<'a>, WireError> {
        let mut entry = DirEntry::default();
        each_field(r, |name, r| {
            match name {
                "Key" => entry.key = r.str()?,
                "Value" => entry.value = r.bytes()?,
                "Flags" => entry.flags = r.u64("Flags")?,
                "Session" => entry.session = r.str()?,
                "LockIndex" => entry.lock_index = r.u64("LockIndex")?,
                "CreateIndex" => entry.create_index = r.u64("CreateIndex")?,
                "ModifyIndex" => entry.modify_index = r.u64("ModifyIndex")?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(entry)
    }
}

/// `KVSRequest`: an operation (`api.KVOp`) on one entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvsRequest<'a> {
    pub datacenter: &'a str,
    pub op: &'a str,
    pub entry: DirEntry<'a>,
    pub token: &'a str,
}

impl<'a> KvsRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<KvsRequest<'a>, WireError> {
        let mut request = KvsRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Op" => request.op = r.str()?,
                "DirEnt" => request.entry = DirEntry::read(r)?,
                _ => return write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The store's operation, or Consul's words for one it does not know. Session IDs
    /// match case-insensitively, as Consul's session index does.
    pub fn operation(&self) -> Result<KvOp, String> {
        let entry = &self.entry;
        let key = entry.key.to_string();
        let value = || Bytes::copy_from_slice(entry.value);
        Ok(match self.op {
            "set" => KvOp::Set {
                key,
                value: value(),
                flags: entry.flags,
            },
            "cas" => KvOp::Cas {
                key,
                value: value(),
                flags: entry.flags,
                modify_index: entry.modify_index,
            },
            "delete" => KvOp::Delete { key },
            "delete-cas" => KvOp::DeleteCas {
                key,
                modify_index: entry.modify_index,
            },
            "delete-tree" => KvOp::DeleteTree { prefix: key },
            "lock" => KvOp::Lock {
                key,
                value: value(),
                flags: entry.flags,
                session: entry.session.to_ascii_lowercase(),
            },
            "unlock" => KvOp::Unlock {
                key,
                value: value(),
                flags: entry.flags,
                session: entry.session.to_ascii_lowercase(),
            },
            other => return Err(format!("Invalid KVS operation '{other}'")),
        })
    }

    /// Whether Consul's FSM answers the operation with its outcome: set, delete and
    /// delete-tree answer nothing, which `KVS.Apply` replies as `false`.
    pub fn replies_outcome(&self) -> bool {
        matches!(self.op, "cas" | "delete-cas" | "lock" | "unlock")
    }
}

/// One `DirEntry` of a reply. Consul CE's `EnterpriseMeta` adds no fields.
pub fn write_dir_entry(w: &mut Writer, entry: &KvFields) {
    let mut f = Fields::new(w, 7);
    f.field("CreateIndex").uint(entry.create_index);
    f.field("Flags").uint(entry.flags);
    f.field("Key").str(entry.key);
    f.field("LockIndex").uint(entry.lock_index);
    f.field("ModifyIndex").uint(entry.modify_index);
    f.field("Session").str(entry.session.unwrap_or(""));
    // A Go `[]byte`: nil when the entry has no value, as Consul stores it.
    f.field("Value")
        .opt_bytes((!entry.value.is_empty()).then_some(entry.value));
    f.finish();
}

/// `IndexedDirEntries`; `entries` empty is Consul's nil `Entries`.
pub fn write_indexed_dir_entries(w: &mut Writer, meta: &QueryMeta, entries: &[KvFields]) {
    meta.write_reply(w, &["Entries"], |_, w| {
        if entries.is_empty() {
            w.nil();
            return;
        }
        w.array_len(entries.len());
        for entry in entries {
            write_dir_entry(w, entry);
        }
    });
}

/// `IndexedKeyList`; no keys is Consul's nil `Keys`.
pub fn write_indexed_key_list(w: &mut Writer, meta: &QueryMeta, keys: &[&str]) {
    meta.write_reply(w, &["Keys"], |_, w| {
        super::write_string_list(w, keys.iter().copied(), true)
    });
}

impl KeyRequest<'_> {
    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(&mut w, &["Datacenter", "Key"], |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ => w.str(self.key),
            });
        w.into_inner()
    }
}

impl KeyListRequest<'_> {
    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(
                &mut w,
                &["Datacenter", "Prefix", "Seperator"],
                |name, w| match name {
                    "Datacenter" => w.str(self.datacenter),
                    "Prefix" => w.str(self.prefix),
                    _ => w.str(self.separator),
                },
            );
        w.into_inner()
    }
}

impl KvsRequest<'_> {
    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let entry = &self.entry;
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        f.field("Datacenter").str(self.datacenter);
        {
            let w = f.field("DirEnt");
            let mut e = Fields::new(w, 7);
            e.field("CreateIndex").uint(entry.create_index);
            e.field("Flags").uint(entry.flags);
            e.field("Key").str(entry.key);
            e.field("LockIndex").uint(entry.lock_index);
            e.field("ModifyIndex").uint(entry.modify_index);
            e.field("Session").str(entry.session);
            e.field("Value").bytes(entry.value);
            e.finish();
        }
        f.field("Op").str(self.op);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `IndexedDirEntries`, as a client reads it.
pub fn read_indexed_dir_entries(body: &[u8]) -> Result<(QueryMeta, Vec<DirEntry<'_>>), WireError> {
    let mut entries = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Entries" {
            return Ok(false);
        }
        let count = r.array_len()?;
        for _ in 0..count {
            entries.push(DirEntry::read(r)?);
        }
        Ok(true)
    })?;
    Ok((meta, entries))
}

/// `IndexedKeyList`, as a client reads it.
pub fn read_indexed_key_list(body: &[u8]) -> Result<(QueryMeta, Vec<&str>), WireError> {
    let mut keys = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Keys" {
            return Ok(false);
        }
        keys = super::string_list(r)?;
        Ok(true)
    })?;
    Ok((meta, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kvs_request_decodes_into_the_store_operation() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        f.field("Datacenter").str("dc1");
        {
            let w = f.field("DirEnt");
            let mut e = Fields::new(w, 4);
            e.field("Flags").uint(42);
            e.field("Key").str("a/b");
            e.field("Session").str("ABC");
            // Python's msgpack sends bytes as bin.
            e.field("Value").raw(&[0xc4, 2, b'h', b'i']);
            e.finish();
        }
        f.field("Op").str("lock");
        f.field("Token").str("t");
        f.finish();
        let request = KvsRequest::decode(&w.buf).unwrap();
        assert_eq!((request.datacenter, request.token), ("dc1", "t"));
        assert!(request.replies_outcome());
        assert_eq!(
            request.operation().unwrap(),
            KvOp::Lock {
                key: "a/b".into(),
                value: Bytes::from_static(b"hi"),
                flags: 42,
                session: "abc".into()
            }
        );
        let bad = KvsRequest {
            op: "frob",
            ..request
        };
        assert_eq!(bad.operation().unwrap_err(), "Invalid KVS operation 'frob'");
    }

    #[test]
    fn requests_and_replies_round_trip_between_client_and_server() {
        let request = KeyRequest {
            datacenter: "dc1",
            key: "a/b",
            options: QueryOptions {
                token: "t",
                min_query_index: 9,
                max_query_time_ns: 5_000_000_000,
                allow_stale: true,
                ..QueryOptions::default()
            },
        };
        assert_eq!(KeyRequest::decode(&request.encode()).unwrap(), request);
        let list = KeyListRequest {
            datacenter: "",
            prefix: "p/",
            separator: "/",
            options: QueryOptions::default(),
        };
        assert_eq!(KeyListRequest::decode(&list.encode()).unwrap(), list);
        let apply = KvsRequest {
            datacenter: "dc1",
            op: "cas",
            entry: DirEntry {
                key: "k",
                value: b"v",
                flags: 3,
                modify_index: 7,
                ..DirEntry::default()
            },
            token: "t",
        };
        assert_eq!(KvsRequest::decode(&apply.encode()).unwrap(), apply);
        let meta = QueryMeta {
            index: 12,
            last_contact_ns: 3_000_000,
            known_leader: true,
            consistency_level: "stale",
            not_modified: false,
            results_filtered_by_acls: true,
        };
        let entry = KvFields {
            key: "k",
            value: b"v",
            flags: 1,
            session: Some("s"),
            lock_index: 1,
            create_index: 2,
            modify_index: 3,
        };
        let mut w = Writer::new();
        write_indexed_dir_entries(&mut w, &meta, &[entry]);
        let (read_meta, entries) = read_indexed_dir_entries(&w.buf).unwrap();
        assert_eq!(read_meta, meta);
        assert_eq!(
            (entries[0].key, entries[0].value, entries[0].session),
            ("k", &b"v"[..], "s")
        );
        let mut w = Writer::new();
        write_indexed_key_list(&mut w, &meta, &["a", "b/"]);
        assert_eq!(
            read_indexed_key_list(&w.buf).unwrap(),
            (meta, vec!["a", "b/"])
        );
    }

    #[test]
    fn dir_entries_encode_as_consul_does() {
        let entry = KvFields {
            key: "k",
            value: b"v",
            flags: 1,
            session: None,
            lock_index: 0,
            create_index: 5,
            modify_index: 6,
        };
        let mut w = Writer::new();
        write_indexed_dir_entries(&mut w, &QueryMeta::default(), &[entry]);
        let mut r = Reader::new(&w.buf);
        let mut found = None;
        each_field(&mut r, |name, r| {
            if name != "Entries" {
                return Ok(false);
            }
            assert_eq!(r.array_len()?, 1);
            let entry = DirEntry::read(r)?;
            found = Some((entry.key, entry.value, entry.modify_index));
            Ok(true)
        })
        .unwrap();
        assert_eq!(found, Some(("k", &b"v"[..], 6)));
        // No entries: nil, as Consul leaves `Entries`.
        let mut w = Writer::new();
        write_indexed_dir_entries(&mut w, &QueryMeta::default(), &[]);
        assert!(w.buf.windows(8).any(|win| win == b"Entries\xc0"));
    }
}
