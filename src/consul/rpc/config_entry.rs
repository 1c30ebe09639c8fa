//! Config entries on the wire: `ConfigEntryRequest` (`ConfigEntry.Apply`, `.Delete`),
//! `ConfigEntryQuery` (`.Get`, `.List`), `ConfigEntryListAllRequest` (`.ListAll`) and their
//! replies `ConfigEntryResponse`, `IndexedConfigEntries`, `IndexedGenericConfigEntries` and
//! `ConfigEntryDeleteResponse`, as Consul's `agent/structs/config_entry.go` lays them out.
//!
//! A config entry is a Go interface, so Consul gives the structs that carry one their own
//! `MarshalBinary`, which go-msgpack writes as a raw string: inside it, the entry's kind
//! as a string first (so the reader knows which struct to decode into), then the values.
//! `ConfigEntryRequest`'s raw string holds the kind, then the request's map;
//! `ConfigEntryResponse`'s the kind (empty for none), the entry, then `QueryMeta`;
//! `IndexedConfigEntries`' the number of entries, the kind, then the map with `Entries`;
//! `IndexedGenericConfigEntries`' the number of entries, each entry's kind and entry,
//! then `QueryMeta`. A `proxy-defaults` entry has its own `MarshalBinary` too, so it is
//! itself a raw string holding its map, wherever it appears.
//!
//! praetor stores an entry as Consul's JSON fields (`consul::config_entry`), so an entry
//! crosses as the map of those fields — the names of the kind's Go struct, `CreateIndex`
//! and `ModifyIndex` among them — converted value for value ([`super::write_json`],
//! [`super::read_json`]); a duration stays the text praetor stores (`"15s"`), where
//! Consul's struct would carry nanoseconds. The reader is bounded by the body's size, the
//! converter's nesting limit and [`KINDS_MAX`].

use super::{each_field, read_json, write_json, Fields, QueryMeta, QueryOptions};
use crate::consul::config_entry::{decode_stored, render_compact};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::mesh::config_entry::{ConfigEntry, ConfigKind};
use serde_json::Value;

/// The most kinds a `ConfigEntryListAllRequest` may name (Consul has thirteen).
pub const KINDS_MAX: usize = 64;

/// An entry's fields as Consul's JSON names them (what the server's HTTP answer renders).
pub fn entry_fields(entry: &ConfigEntry) -> Value {
    let mut compact = Vec::with_capacity(256);
    render_compact(entry, &mut compact);
    serde_json::from_slice(&compact).expect("a rendered entry is JSON")
}

/// Reads an entry's fields back into the store's entry, as the server stored it.
pub fn entry_of(fields: &Value) -> Result<ConfigEntry, WireError> {
    decode_stored(fields).map_err(|_| WireError::Invalid("config entry does not decode"))
}

/// Writes an entry of `kind` (a `proxy-defaults` entry wrapped in a raw string, as its
/// `MarshalBinary` makes it).
pub fn write_entry(w: &mut Writer, kind: ConfigKind, fields: &Value) {
    if kind == ConfigKind::ProxyDefaults {
        let mut inner = Writer::new();
        write_json(&mut inner, fields);
        w.bytes(&inner.into_inner());
    } else {
        write_json(w, fields);
    }
}

/// Reads an entry, a map or a raw string holding one.
pub fn read_entry(r: &mut Reader) -> Result<Value, WireError> {
    if is_raw(r.peek()?) {
        let inner = r.bytes()?;
        let mut inner = Reader::new(inner);
        let value = read_json(&mut inner)?;
        return Ok(value);
    }
    read_json(r)
}

/// Whether a marker starts a msgpack string or binary.
fn is_raw(marker: u8) -> bool {
    matches!(marker, 0xa0..=0xbf | 0xd9..=0xdb | 0xc4..=0xc6)
}

/// The kind an entry's fields name, `None` when they name none Consul knows.
fn kind_of(fields: &Value) -> Option<ConfigKind> {
    fields
        .get("Kind")
        .and_then(Value::as_str)
        .and_then(ConfigKind::parse)
}

/// `ConfigEntryRequest`: an operation on one entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigEntryRequest<'a> {
    /// `upsert`, `upsert-cas`, `delete` or `delete-cas`.
    pub op: &'a str,
    pub datacenter: &'a str,
    /// The kind the request's prefix names (or the entry's `Kind` for a bare map).
    pub kind: &'a str,
    /// The entry's fields; a CAS operation's index is its `ModifyIndex`.
    pub entry: Value,
    pub token: &'a str,
}

impl<'a> ConfigEntryRequest<'a> {
    /// Reads Consul's form (a raw string: the kind, then the request), or the request's map
    /// alone.
    pub fn decode(body: &'a [u8]) -> Result<ConfigEntryRequest<'a>, WireError> {
        let mut request = ConfigEntryRequest::default();
        let mut outer = Reader::new(body);
        let mut reader = if is_raw(outer.peek()?) {
            let mut inner = Reader::new(outer.bytes()?);
            request.kind = inner.str()?;
            inner
        } else {
            outer
        };
        each_field(&mut reader, |name, r| {
            match name {
                "Op" => request.op = r.str()?,
                "Datacenter" => request.datacenter = r.str()?,
                "Entry" => request.entry = read_entry(r)?,
                _ => return super::write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        if request.kind.is_empty() {
            request.kind = match kind_of(&request.entry) {
                Some(kind) => kind.as_str(),
                None => "",
            };
        }
        Ok(request)
    }

    /// The request as Consul's agent sends it: a raw string holding the kind, then the
    /// request.
    pub fn encode(&self) -> Vec<u8> {
        let mut inner = Writer::new();
        inner.str(self.kind);
        let mut f = Fields::new(&mut inner, 4);
        f.field("Datacenter").str(self.datacenter);
        match ConfigKind::parse(self.kind) {
            Some(kind) => write_entry(f.field("Entry"), kind, &self.entry),
            None => f.field("Entry").nil(),
        }
        f.field("Op").str(self.op);
        f.field("Token").str(self.token);
        f.finish();
        let mut w = Writer::new();
        w.bytes(&inner.into_inner());
        w.into_inner()
    }

    /// A CAS operation's index: the entry's `ModifyIndex`.
    pub fn cas_index(&self) -> u64 {
        self.entry
            .get("ModifyIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    /// The entry's `Name` (empty when it has none).
    pub fn name(&self) -> &str {
        self.entry
            .get("Name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// `ConfigEntryQuery`: one entry (`Kind` and `Name`) or the entries of a kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigEntryQuery<'a> {
    pub kind: &'a str,
    pub name: &'a str,
    pub datacenter: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> ConfigEntryQuery<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ConfigEntryQuery<'a>, WireError> {
        let mut request = ConfigEntryQuery::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Kind" => request.kind = r.str()?,
                "Name" => request.name = r.str()?,
                "Datacenter" => request.datacenter = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Datacenter", "Kind", "Name"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "Kind" => w.str(self.kind),
                _ => w.str(self.name),
            },
        );
        w.into_inner()
    }
}

/// `ConfigEntryListAllRequest`: the entries of several kinds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigEntryListAllRequest<'a> {
    pub kinds: Vec<&'a str>,
    pub datacenter: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> ConfigEntryListAllRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ConfigEntryListAllRequest<'a>, WireError> {
        let mut request = ConfigEntryListAllRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Kinds" => {
                    let kinds = super::string_list(r)?;
                    if kinds.len() > KINDS_MAX {
                        return Err(WireError::TooLarge {
                            what: "Kinds",
                            limit: KINDS_MAX,
                        });
                    }
                    request.kinds = kinds;
                }
                "Datacenter" => request.datacenter = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(&mut w, &["Datacenter", "Kinds"], |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ => super::write_string_list(w, self.kinds.iter().copied(), true),
            });
        w.into_inner()
    }
}

/// Consul's kinds of an empty `Kinds` (the kinds of Consul 1.8, for older agents).
pub const LIST_ALL_DEFAULT_KINDS: [ConfigKind; 7] = [
    ConfigKind::ProxyDefaults,
    ConfigKind::ServiceDefaults,
    ConfigKind::ServiceResolver,
    ConfigKind::ServiceSplitter,
    ConfigKind::ServiceRouter,
    ConfigKind::TerminatingGateway,
    ConfigKind::IngressGateway,
];

/// Wraps what `write` writes in a raw string, as a `MarshalBinary` result is written.
fn binary(write: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut inner = Writer::new();
    write(&mut inner);
    let mut w = Writer::new();
    w.bytes(&inner.into_inner());
    w.into_inner()
}

/// Writes `QueryMeta` alone, as a struct.
fn write_meta(w: &mut Writer, meta: &QueryMeta) {
    meta.write_reply(w, &[], |_, _| {});
}

fn read_meta(r: &mut Reader) -> Result<QueryMeta, WireError> {
    let mut meta = QueryMeta::default();
    each_field(r, |name, r| meta.field(name, r))?;
    Ok(meta)
}

/// `ConfigEntryResponse`: one entry, or none.
pub fn write_entry_response(meta: &QueryMeta, entry: Option<&ConfigEntry>) -> Vec<u8> {
    binary(|w| {
        match entry {
            Some(entry) => {
                w.str(entry.kind.as_str());
                write_entry(w, entry.kind, &entry_fields(entry));
            }
            None => w.str(""),
        }
        write_meta(w, meta);
    })
}

/// Reads a `ConfigEntryResponse`: its metadata and the entry's fields, if any.
pub fn read_entry_response(body: &[u8]) -> Result<(QueryMeta, Option<Value>), WireError> {
    let mut outer = Reader::new(body);
    let mut r = Reader::new(outer.bytes()?);
    let kind = r.str()?;
    let entry = if kind.is_empty() {
        None
    } else {
        Some(read_entry(&mut r)?)
    };
    Ok((read_meta(&mut r)?, entry))
}

/// `IndexedConfigEntries`: the entries of one kind.
pub fn write_indexed_entries(
    meta: &QueryMeta,
    kind: ConfigKind,
    entries: &[&ConfigEntry],
) -> Vec<u8> {
    binary(|w| {
        w.uint(entries.len() as u64);
        w.str(kind.as_str());
        meta.write_reply(w, &["Entries", "Kind"], |name, w| match name {
            "Entries" => {
                if entries.is_empty() {
                    w.nil();
                } else {
                    w.array_len(entries.len());
                    for entry in entries {
                        write_entry(w, entry.kind, &entry_fields(entry));
                    }
                }
            }
            _ => w.str(kind.as_str()),
        });
    })
}

/// Reads an `IndexedConfigEntries`: its metadata and the entries' fields.
pub fn read_indexed_entries(body: &[u8]) -> Result<(QueryMeta, Vec<Value>), WireError> {
    let mut outer = Reader::new(body);
    let mut r = Reader::new(outer.bytes()?);
    // The count and kind lead for Go's decoder; the map says both again.
    r.u64("number of entries")?;
    r.str()?;
    let mut entries = Vec::new();
    let mut meta = QueryMeta::default();
    each_field(&mut r, |name, r| {
        if name == "Entries" {
            let count = r.array_len()?;
            entries.reserve(count);
            for _ in 0..count {
                entries.push(read_entry(r)?);
            }
            return Ok(true);
        }
        meta.field(name, r)
    })?;
    Ok((meta, entries))
}

/// `IndexedGenericConfigEntries`: entries of any kinds, each after its kind.
pub fn write_generic_entries(meta: &QueryMeta, entries: &[&ConfigEntry]) -> Vec<u8> {
    binary(|w| {
        w.uint(entries.len() as u64);
        for entry in entries {
            w.str(entry.kind.as_str());
            write_entry(w, entry.kind, &entry_fields(entry));
        }
        write_meta(w, meta);
    })
}

/// Reads an `IndexedGenericConfigEntries`: its metadata and the entries' fields.
pub fn read_generic_entries(body: &[u8]) -> Result<(QueryMeta, Vec<Value>), WireError> {
    let mut outer = Reader::new(body);
    let mut r = Reader::new(outer.bytes()?);
    let count = r.u64("number of entries")?;
    // Each entry takes more than one byte: a count beyond the bytes left is a lie.
    if count > r.remaining() as u64 {
        return Err(WireError::Invalid("more entries announced than sent"));
    }
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        r.str()?;
        entries.push(read_entry(&mut r)?);
    }
    Ok((read_meta(&mut r)?, entries))
}

/// `ConfigEntryDeleteResponse`.
pub fn write_delete_response(deleted: bool) -> Vec<u8> {
    let mut w = Writer::new();
    let mut f = Fields::new(&mut w, 1);
    f.field("Deleted").bool(deleted);
    f.finish();
    w.into_inner()
}

/// Reads a `ConfigEntryDeleteResponse`.
pub fn read_delete_response(body: &[u8]) -> Result<bool, WireError> {
    let mut deleted = false;
    each_field(&mut Reader::new(body), |name, r| {
        if name == "Deleted" {
            deleted = r.bool()?;
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::config_entry::{decode_body, render};

    fn stored(body: &str, create_index: u64, modify_index: u64) -> ConfigEntry {
        let mut entry = decode_body(body.as_bytes()).expect("a valid entry");
        entry.create_index = create_index;
        entry.modify_index = modify_index;
        entry
    }

    /// Entries of every shape the renderer has: typed fields, opaque maps, durations,
    /// floats, strings that need escaping, intentions with permissions and legacy fields.
    fn samples() -> Vec<ConfigEntry> {
        vec![
            stored(
                r#"{"Kind":"service-defaults","Name":"web","Protocol":"HTTP","Meta":{"a":"<b> & \"c\""}}"#,
                7,
                9,
            ),
            stored(
                r#"{"Kind":"proxy-defaults","Name":"global","Config":{"protocol":"http","ratio":0.25,"big":1e21,"nested":{"z":[1,"<x>"],"a":null}}}"#,
                3,
                4,
            ),
            stored(
                r#"{"Kind":"service-resolver","Name":"web","DefaultSubset":"v1","Subsets":{"v1":{"Filter":"Service.Meta.version == v1"}},"ConnectTimeout":"15s"}"#,
                5,
                5,
            ),
            stored(
                r#"{"Kind":"ingress-gateway","Name":"ig","Listeners":[{"Port":80,"Services":[{"Name":"a"}]}]}"#,
                8,
                8,
            ),
            stored(
                r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"web","Action":"allow","Description":"d"},{"Name":"*","Permissions":[{"Action":"deny","HTTP":{"PathPrefix":"/admin","Methods":["get"]}}]}],"Meta":{"k":"v"}}"#,
                10,
                12,
            ),
            stored(
                r#"{"Kind":"mesh","TransparentProxy":{"MeshDestinationsOnly":true}}"#,
                2,
                2,
            ),
        ]
    }

    fn rendered(entry: &ConfigEntry, pretty: bool) -> Vec<u8> {
        let mut out = Vec::new();
        render(entry, pretty, &mut out);
        out
    }

    #[test]
    fn an_entry_read_back_renders_as_the_server_renders_it() {
        for entry in samples() {
            let meta = QueryMeta {
                index: 12,
                known_leader: true,
                consistency_level: "leader",
                ..QueryMeta::default()
            };
            let (read_meta, fields) =
                read_entry_response(&write_entry_response(&meta, Some(&entry))).unwrap();
            assert_eq!(read_meta, meta);
            let back = entry_of(&fields.unwrap()).unwrap();
            for pretty in [false, true] {
                assert_eq!(
                    String::from_utf8(rendered(&back, pretty)).unwrap(),
                    String::from_utf8(rendered(&entry, pretty)).unwrap()
                );
            }
            assert_eq!(back.protocol, entry.protocol);
        }
        let (_, none) =
            read_entry_response(&write_entry_response(&QueryMeta::default(), None)).unwrap();
        assert!(none.is_none());
    }

    #[test]
    fn a_legacy_intention_keeps_its_legacy_fields() {
        use crate::store::mesh::config_entry::EntryBody;
        let mut entry = stored(
            r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"web","Action":"allow"}]}"#,
            4,
            4,
        );
        let EntryBody::Intentions(body) = &mut entry.body else {
            panic!("intentions")
        };
        let body = std::sync::Arc::make_mut(body);
        body.sources[0].legacy_id = "0c1d2e3f-0000-0000-0000-000000000001".into();
        body.sources[0].legacy_create_time_ns = Some(1_700_000_000_123_456_789);
        body.sources[0].legacy_update_time_ns = Some(1_700_000_001_000_000_000);
        body.sources[0].legacy_meta = Some(vec![("m".into(), "n".into())]);
        let fields = entry_fields(&entry);
        let back = entry_of(&fields).unwrap();
        assert_eq!(rendered(&back, false), rendered(&entry, false));
    }

    #[test]
    fn lists_and_requests_cross_both_ways() {
        let entries = samples();
        let refs: Vec<&ConfigEntry> = entries.iter().collect();
        let meta = QueryMeta {
            index: 30,
            ..QueryMeta::default()
        };
        let (read_meta, all) = read_generic_entries(&write_generic_entries(&meta, &refs)).unwrap();
        assert_eq!((read_meta.index, all.len()), (30, entries.len()));
        for (fields, entry) in all.iter().zip(&entries) {
            assert_eq!(
                rendered(&entry_of(fields).unwrap(), false),
                rendered(entry, false)
            );
        }
        let proxies = [&entries[1]];
        let body = write_indexed_entries(&meta, ConfigKind::ProxyDefaults, &proxies);
        let (_, listed) = read_indexed_entries(&body).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["Name"], "global");

        let request = ConfigEntryRequest {
            op: "upsert-cas",
            datacenter: "dc1",
            kind: "proxy-defaults",
            entry: entry_fields(&entries[1]),
            token: "t",
        };
        let encoded = request.encode();
        let decoded = ConfigEntryRequest::decode(&encoded).unwrap();
        assert_eq!(decoded, request);
        assert_eq!(decoded.cas_index(), 4);
        assert_eq!(decoded.name(), "global");

        let query = ConfigEntryQuery {
            kind: "service-defaults",
            name: "web",
            datacenter: "dc1",
            options: QueryOptions {
                min_query_index: 5,
                ..QueryOptions::default()
            },
        };
        assert_eq!(ConfigEntryQuery::decode(&query.encode()).unwrap(), query);
        let all = ConfigEntryListAllRequest {
            kinds: vec!["mesh", "service-defaults"],
            ..ConfigEntryListAllRequest::default()
        };
        assert_eq!(
            ConfigEntryListAllRequest::decode(&all.encode()).unwrap(),
            all
        );
        assert!(read_delete_response(&write_delete_response(true)).unwrap());
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        for body in [
            &b""[..],
            b"\xc4\x05\xa3abc",
            b"\xc4\x02\xa0\x81",
            b"\xc4\x03\x05\xa0\x80",
            b"\xc4\x03\xcf\xff\xff",
        ] {
            let _ = ConfigEntryRequest::decode(body);
            let _ = read_entry_response(body);
            let _ = read_indexed_entries(body);
            assert!(read_generic_entries(body).is_err());
        }
    }
}
