//! Intentions on the wire: `IntentionRequest` (`Intention.Apply`), `IntentionQueryRequest`
//! (`.Get` by `IntentionID` or `Exact`, `.Match`, `.Check`), `IntentionListRequest`
//! (`.List`) and the replies `IndexedIntentions`, `IndexedIntentionMatches` and
//! `IntentionQueryCheckResponse`, as Consul's `agent/structs/intention.go` lays them out.
//!
//! An [`Intention`] is Consul's legacy `structs.Intention`: the fields `GET
//! /v1/connect/intentions` shows, `CreatedAt` and `UpdatedAt` as go-msgpack writes a
//! `time.Time` (its `MarshalBinary` bytes; Go's zero time for an intention written as a
//! config entry), `Permissions` as the map of their JSON fields. praetor stores an
//! intention as a source of its destination's `service-intentions` entry; [`Intention::of`]
//! reads one out of the store and [`Intention::to_doc`] renders one read back exactly as
//! the server's HTTP answer renders the stored source (`legacy_doc`), so a client agent's
//! body is its server's. `IntentionQueryCheckResponse` also carries `QueryMeta`, which
//! Consul's has not (decoders skip it): praetor's check is a blocking read whose answer
//! has the query's headers.
//!
//! Every reader is bounded by the body's size, the converter's nesting limit and
//! [`MATCH_ENTRIES_MAX`].

use super::{each_field, read_json, string_map, write_json, Fields, QueryMeta, QueryOptions};
use crate::consul::config_entry::doc::Doc;
use crate::consul::config_entry::intention::{decode_legacy, legacy_doc, shown_meta};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::mesh::config_entry::ConfigEntry;
use crate::store::mesh::intentions::{Action, SourceIntention};
use arcstr::ArcStr;
use serde_json::Value;

/// The most names one `Match` may ask about (what `GET /v1/connect/intentions/match`
/// accepts too).
pub const MATCH_ENTRIES_MAX: usize = 64;

/// Seconds from 0001-01-01 to 1970-01-01 (Go's `unixToInternal`).
const UNIX_TO_INTERNAL_SECONDS: i64 = 62_135_596_800;

/// Go's zero `time.Time` as `MarshalBinary` writes it: version 1, zero seconds and
/// nanoseconds, UTC.
const GO_ZERO_TIME_BINARY: [u8; 15] = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

fn write_time(w: &mut Writer, unix_ns: Option<i64>) {
    match unix_ns {
        Some(ns) => w.bytes(&super::go_time_binary(ns)),
        None => w.bytes(&GO_ZERO_TIME_BINARY),
    }
}

/// Reads a `time.Time`: `MarshalBinary`'s bytes (version 1 or 2), or RFC 3339 text from a
/// client that wrote it as a string; Go's zero time and anything else is `None`.
fn read_time(r: &mut Reader) -> Result<Option<i64>, WireError> {
    let raw = r.bytes()?;
    if matches!(raw.len(), 15 | 16) && matches!(raw[0], 1 | 2) {
        let seconds = i64::from_be_bytes(raw[1..9].try_into().expect("eight bytes"));
        let nanos = i32::from_be_bytes(raw[9..13].try_into().expect("four bytes"));
        if seconds == 0 && nanos == 0 {
            return Ok(None);
        }
        let unix = seconds.saturating_sub(UNIX_TO_INTERNAL_SECONDS);
        return Ok(Some(
            unix.saturating_mul(1_000_000_000)
                .saturating_add(i64::from(nanos)),
        ));
    }
    Ok(std::str::from_utf8(raw)
        .ok()
        .and_then(crate::proto::rfc3339::parse_ns))
}

/// Consul's legacy `structs.Intention`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Intention<'a> {
    pub id: &'a str,
    pub description: &'a str,
    pub source_peer: &'a str,
    pub source_sameness_group: &'a str,
    pub source_ns: &'a str,
    pub source_name: &'a str,
    pub destination_ns: &'a str,
    pub destination_name: &'a str,
    pub source_type: &'a str,
    /// `allow`, `deny`, or empty for L7 permissions.
    pub action: &'a str,
    /// `Permissions` as their JSON fields; `Null` when there are none.
    pub permissions: Value,
    pub meta: Vec<(&'a str, &'a str)>,
    pub precedence: i64,
    pub created_at_ns: Option<i64>,
    pub updated_at_ns: Option<i64>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl<'a> Intention<'a> {
    /// The intention a stored source of `entry` shows as (what `legacy_doc` renders).
    pub fn of(entry: &'a ConfigEntry, source: &'a SourceIntention) -> Intention<'a> {
        let entry_meta = entry
            .intentions()
            .map(|body| body.meta.as_slice())
            .unwrap_or_default();
        let permissions = if source.is_l7() {
            serde_json::from_str(&source.permissions_json).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        Intention {
            id: &source.legacy_id,
            description: &source.description,
            source_peer: &source.peer,
            source_sameness_group: &source.sameness_group,
            source_ns: "default",
            source_name: &source.name,
            destination_ns: "default",
            destination_name: &entry.name,
            source_type: &source.source_type,
            action: source.action.map(Action::as_str).unwrap_or_default(),
            permissions,
            meta: shown_meta(entry_meta, source)
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
            precedence: i64::from(source.precedence),
            created_at_ns: source.legacy_create_time_ns,
            updated_at_ns: source.legacy_update_time_ns,
            create_index: entry.create_index,
            modify_index: entry.modify_index,
        }
    }

    /// The legacy intention's JSON fields as a request body spells them (what
    /// `decode_legacy` reads).
    pub fn body_fields(&self) -> Value {
        let meta: serde_json::Map<String, Value> = self
            .meta
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        serde_json::json!({
            "ID": self.id,
            "Description": self.description,
            "SourcePeer": self.source_peer,
            "SourceNS": self.source_ns,
            "SourceName": self.source_name,
            "DestinationNS": self.destination_ns,
            "DestinationName": self.destination_name,
            "SourceType": self.source_type,
            "Action": self.action,
            "Permissions": self.permissions,
            "Meta": meta,
        })
    }

    /// The intention as the server's HTTP answer renders it: read back into the store's
    /// source and rendered by `legacy_doc`.
    pub fn to_doc(&self) -> Result<Doc, WireError> {
        // `Permissions` back into their canonical text, as the server stores them.
        let permissions_json = if self.permissions.is_null() {
            ArcStr::new()
        } else {
            decode_legacy(&serde_json::json!({ "Permissions": self.permissions }))
                .map_err(|_| WireError::Invalid("intention permissions do not decode"))?
                .permissions_json
        };
        let meta: Vec<(String, String)> = self
            .meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let source = SourceIntention {
            name: ArcStr::from(self.source_name),
            action: Action::parse(self.action),
            permissions_json,
            precedence: u32::try_from(self.precedence).unwrap_or(0),
            legacy_id: ArcStr::from(self.id),
            source_type: ArcStr::from(self.source_type),
            description: ArcStr::from(self.description),
            legacy_meta: Some(meta.clone()),
            legacy_create_time_ns: self.created_at_ns,
            legacy_update_time_ns: self.updated_at_ns,
            peer: ArcStr::from(self.source_peer),
            sameness_group: ArcStr::from(self.source_sameness_group),
        };
        Ok(legacy_doc(
            self.destination_name,
            &meta,
            &source,
            self.create_index,
            self.modify_index,
        ))
    }

    pub fn write(&self, w: &mut Writer) {
        let mut f = Fields::new(w, 20);
        f.field("Action").str(self.action);
        f.field("CreateIndex").uint(self.create_index);
        write_time(f.field("CreatedAt"), self.created_at_ns);
        f.field("Description").str(self.description);
        f.field("DestinationNS").str(self.destination_ns);
        f.field("DestinationName").str(self.destination_name);
        f.field("DestinationPartition").str("");
        f.field("Hash").nil();
        f.field("ID").str(self.id);
        super::write_string_map(f.field("Meta"), self.meta.iter().copied(), true);
        f.field("ModifyIndex").uint(self.modify_index);
        if self.permissions.is_null() {
            f.field("Permissions").nil();
        } else {
            write_json(f.field("Permissions"), &self.permissions);
        }
        f.field("Precedence").int(self.precedence);
        f.field("SourceNS").str(self.source_ns);
        f.field("SourceName").str(self.source_name);
        f.field("SourcePartition").str("");
        f.field("SourcePeer").str(self.source_peer);
        f.field("SourceSamenessGroup")
            .str(self.source_sameness_group);
        f.field("SourceType").str(self.source_type);
        write_time(f.field("UpdatedAt"), self.updated_at_ns);
        f.finish();
    }

    pub fn read(r: &mut Reader<'a>) -> Result<Intention<'a>, WireError> {
        let mut ixn = Intention::default();
        each_field(r, |name, r| {
            match name {
                "ID" => ixn.id = r.str()?,
                "Description" => ixn.description = r.str()?,
                "SourcePeer" => ixn.source_peer = r.str()?,
                "SourceSamenessGroup" => ixn.source_sameness_group = r.str()?,
                "SourceNS" => ixn.source_ns = r.str()?,
                "SourceName" => ixn.source_name = r.str()?,
                "DestinationNS" => ixn.destination_ns = r.str()?,
                "DestinationName" => ixn.destination_name = r.str()?,
                "SourceType" => ixn.source_type = r.str()?,
                "Action" => ixn.action = r.str()?,
                "Permissions" => ixn.permissions = read_json(r)?,
                "Meta" => ixn.meta = string_map(r)?,
                "Precedence" => ixn.precedence = r.i64("Precedence")?,
                "CreatedAt" => ixn.created_at_ns = read_time(r)?,
                "UpdatedAt" => ixn.updated_at_ns = read_time(r)?,
                "CreateIndex" => ixn.create_index = r.u64("CreateIndex")?,
                "ModifyIndex" => ixn.modify_index = r.u64("ModifyIndex")?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(ixn)
    }
}

/// `IntentionRequest`: `create`, `update`, `upsert` or `delete` of one intention.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntentionRequest<'a> {
    pub datacenter: &'a str,
    pub op: &'a str,
    pub intention: Option<Intention<'a>>,
    pub token: &'a str,
}

impl<'a> IntentionRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<IntentionRequest<'a>, WireError> {
        let mut request = IntentionRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Op" => request.op = r.str()?,
                "Intention" => {
                    if !r.try_nil()? {
                        request.intention = Some(Intention::read(r)?);
                    }
                }
                _ => return super::write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        f.field("Datacenter").str(self.datacenter);
        match &self.intention {
            Some(ixn) => ixn.write(f.field("Intention")),
            None => f.field("Intention").nil(),
        }
        f.field("Op").str(self.op);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `IntentionQueryExact`: one intention by its source and destination.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exact<'a> {
    pub source_name: &'a str,
    pub destination_name: &'a str,
}

/// `IntentionQueryMatch`: the intentions that apply to each name, by source or destination.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Match<'a> {
    /// `source` or `destination`.
    pub kind: &'a str,
    pub names: Vec<&'a str>,
}

/// `IntentionQueryCheck`: whether a source may connect to a destination.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check<'a> {
    pub source_name: &'a str,
    pub destination_name: &'a str,
    pub source_type: &'a str,
}

/// `IntentionQueryRequest`: `Intention.Get` (`IntentionID` or `Exact`), `.Match`, `.Check`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntentionQueryRequest<'a> {
    pub datacenter: &'a str,
    pub intention_id: &'a str,
    pub exact: Option<Exact<'a>>,
    pub matching: Option<Match<'a>>,
    pub check: Option<Check<'a>>,
    pub options: QueryOptions<'a>,
}

fn read_exact<'a>(r: &mut Reader<'a>) -> Result<Exact<'a>, WireError> {
    let mut exact = Exact::default();
    each_field(r, |name, r| {
        match name {
            "SourceName" => exact.source_name = r.str()?,
            "DestinationName" => exact.destination_name = r.str()?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(exact)
}

fn read_match<'a>(r: &mut Reader<'a>) -> Result<Match<'a>, WireError> {
    let mut matching = Match::default();
    each_field(r, |name, r| {
        match name {
            "Type" => matching.kind = r.str()?,
            "Entries" => {
                let count = r.array_len()?;
                if count > MATCH_ENTRIES_MAX {
                    return Err(WireError::TooLarge {
                        what: "Entries",
                        limit: MATCH_ENTRIES_MAX,
                    });
                }
                for _ in 0..count {
                    let mut entry_name = "";
                    each_field(r, |name, r| {
                        if name == "Name" {
                            entry_name = r.str()?;
                            return Ok(true);
                        }
                        Ok(false)
                    })?;
                    matching.names.push(entry_name);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(matching)
}

fn read_check<'a>(r: &mut Reader<'a>) -> Result<Check<'a>, WireError> {
    let mut check = Check::default();
    each_field(r, |name, r| {
        match name {
            "SourceName" => check.source_name = r.str()?,
            "DestinationName" => check.destination_name = r.str()?,
            "SourceType" => check.source_type = r.str()?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(check)
}

impl<'a> IntentionQueryRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<IntentionQueryRequest<'a>, WireError> {
        let mut request = IntentionQueryRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "IntentionID" => request.intention_id = r.str()?,
                "Exact" if !r.try_nil()? => request.exact = Some(read_exact(r)?),
                "Match" if !r.try_nil()? => request.matching = Some(read_match(r)?),
                "Check" if !r.try_nil()? => request.check = Some(read_check(r)?),
                "Exact" | "Match" | "Check" => {}
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as Consul's agent sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Check", "Datacenter", "Exact", "IntentionID", "Match"],
            |name, w| match name {
                "Check" => match &self.check {
                    Some(check) => {
                        let mut f = Fields::new(w, 5);
                        f.field("DestinationNS").str("default");
                        f.field("DestinationName").str(check.destination_name);
                        f.field("SourceNS").str("default");
                        f.field("SourceName").str(check.source_name);
                        f.field("SourceType").str(check.source_type);
                        f.finish();
                    }
                    None => w.nil(),
                },
                "Datacenter" => w.str(self.datacenter),
                "Exact" => match &self.exact {
                    Some(exact) => {
                        let mut f = Fields::new(w, 4);
                        f.field("DestinationNS").str("default");
                        f.field("DestinationName").str(exact.destination_name);
                        f.field("SourceNS").str("default");
                        f.field("SourceName").str(exact.source_name);
                        f.finish();
                    }
                    None => w.nil(),
                },
                "IntentionID" => w.str(self.intention_id),
                _ => match &self.matching {
                    Some(matching) => {
                        let mut f = Fields::new(w, 2);
                        let entries = f.field("Entries");
                        entries.array_len(matching.names.len());
                        for name in &matching.names {
                            let mut e = Fields::new(entries, 2);
                            e.field("Name").str(name);
                            e.field("Namespace").str("default");
                            e.finish();
                        }
                        f.field("Type").str(matching.kind);
                        f.finish();
                    }
                    None => w.nil(),
                },
            },
        );
        w.into_inner()
    }
}

/// `IntentionListRequest`: every intention the token may read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntentionListRequest<'a> {
    pub datacenter: &'a str,
    pub legacy: bool,
    pub options: QueryOptions<'a>,
}

impl<'a> IntentionListRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<IntentionListRequest<'a>, WireError> {
        let mut request = IntentionListRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Legacy" => request.legacy = r.bool()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(&mut w, &["Datacenter", "Legacy"], |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ => w.bool(self.legacy),
            });
        w.into_inner()
    }
}

fn write_list(w: &mut Writer, intentions: &[Intention]) {
    w.array_len(intentions.len());
    for ixn in intentions {
        ixn.write(w);
    }
}

fn read_list<'a>(r: &mut Reader<'a>) -> Result<Vec<Intention<'a>>, WireError> {
    let count = r.array_len()?;
    let mut list = Vec::with_capacity(count);
    for _ in 0..count {
        list.push(Intention::read(r)?);
    }
    Ok(list)
}

/// `IndexedIntentions`.
pub fn write_indexed_intentions(meta: &QueryMeta, intentions: &[Intention]) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(
        &mut w,
        &["DataOrigin", "Intentions"],
        |name, w| match name {
            "DataOrigin" => w.str(""),
            _ => write_list(w, intentions),
        },
    );
    w.into_inner()
}

/// Reads an `IndexedIntentions`.
pub fn read_indexed_intentions(body: &[u8]) -> Result<(QueryMeta, Vec<Intention<'_>>), WireError> {
    let mut list = Vec::new();
    let meta = super::read_reply(body, |name, r| {
        if name == "Intentions" {
            list = read_list(r)?;
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok((meta, list))
}

/// `IndexedIntentionMatches`: for each name asked about, its intentions.
pub fn write_matches(meta: &QueryMeta, matches: &[Vec<Intention>]) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Matches"], |_, w| {
        w.array_len(matches.len());
        for list in matches {
            write_list(w, list);
        }
    });
    w.into_inner()
}

/// Reads an `IndexedIntentionMatches`.
#[allow(clippy::type_complexity)]
pub fn read_matches(body: &[u8]) -> Result<(QueryMeta, Vec<Vec<Intention<'_>>>), WireError> {
    let mut matches = Vec::new();
    let meta = super::read_reply(body, |name, r| {
        if name == "Matches" {
            let count = r.array_len()?;
            if count > MATCH_ENTRIES_MAX {
                return Err(WireError::TooLarge {
                    what: "Matches",
                    limit: MATCH_ENTRIES_MAX,
                });
            }
            for _ in 0..count {
                matches.push(read_list(r)?);
            }
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok((meta, matches))
}

/// `IntentionQueryCheckResponse`, with the read's `QueryMeta`.
pub fn write_check_response(meta: &QueryMeta, allowed: bool) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Allowed"], |_, w| w.bool(allowed));
    w.into_inner()
}

/// Reads an `IntentionQueryCheckResponse`.
pub fn read_check_response(body: &[u8]) -> Result<(QueryMeta, bool), WireError> {
    let mut allowed = false;
    let meta = super::read_reply(body, |name, r| {
        if name == "Allowed" {
            allowed = r.bool()?;
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok((meta, allowed))
}

/// Reads `Intention.Apply`'s reply: the intention's ID.
pub fn read_apply_reply(body: &[u8]) -> Result<&str, WireError> {
    Reader::new(body).str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::config_entry::decode_body;
    use crate::store::mesh::config_entry::EntryBody;

    fn entry() -> ConfigEntry {
        let mut entry = decode_body(
            br#"{"Kind":"service-intentions","Name":"db","Sources":[
                {"Name":"web","Action":"allow","Description":"<d&>"},
                {"Name":"*","Permissions":[{"Action":"deny","HTTP":{"PathPrefix":"/admin","Methods":["GET"],"Header":[{"Name":"x","Exact":"y"}]}}]}],
                "Meta":{"k":"v"}}"#,
        )
        .expect("a valid entry");
        entry.create_index = 4;
        entry.modify_index = 9;
        let EntryBody::Intentions(body) = &mut entry.body else {
            panic!("intentions")
        };
        let body = std::sync::Arc::make_mut(body);
        body.sources[0].legacy_id = "0c1d2e3f-0000-0000-0000-000000000001".into();
        body.sources[0].legacy_create_time_ns = Some(1_700_000_000_123_456_789);
        body.sources[0].legacy_update_time_ns = Some(1_700_000_001_000_000_000);
        body.sources[0].legacy_meta = Some(vec![("m".into(), "n".into())]);
        entry
    }

    #[test]
    fn an_intention_read_back_renders_as_the_server_renders_it() {
        let entry = entry();
        let meta = QueryMeta {
            index: 9,
            known_leader: true,
            consistency_level: "leader",
            ..QueryMeta::default()
        };
        let sources = &entry.intentions().unwrap().sources;
        let wire: Vec<Intention> = sources.iter().map(|s| Intention::of(&entry, s)).collect();
        let body = write_indexed_intentions(&meta, &wire);
        let (back_meta, back) = read_indexed_intentions(&body).unwrap();
        assert_eq!(back_meta, meta);
        assert_eq!(back.len(), 2);
        for (ixn, source) in back.iter().zip(sources) {
            let expected = legacy_doc(&entry.name, &entry.intentions().unwrap().meta, source, 4, 9);
            assert_eq!(ixn.to_doc().unwrap().to_json(), expected.to_json());
        }
        let matches = write_matches(&meta, &[wire.clone(), Vec::new()]);
        let (_, back) = read_matches(&matches).unwrap();
        assert_eq!((back.len(), back[0].len(), back[1].len()), (2, 2, 0));
        let (_, allowed) = read_check_response(&write_check_response(&meta, true)).unwrap();
        assert!(allowed);
    }

    #[test]
    fn requests_cross_both_ways() {
        let entry = entry();
        let source = &entry.intentions().unwrap().sources[0];
        let request = IntentionRequest {
            datacenter: "dc1",
            op: "create",
            intention: Some(Intention::of(&entry, source)),
            token: "t",
        };
        assert_eq!(
            IntentionRequest::decode(&request.encode()).unwrap(),
            request
        );
        let query = IntentionQueryRequest {
            intention_id: "x",
            exact: Some(Exact {
                source_name: "web",
                destination_name: "db",
            }),
            matching: Some(Match {
                kind: "destination",
                names: vec!["db", "*"],
            }),
            check: Some(Check {
                source_name: "web",
                destination_name: "db",
                source_type: "consul",
            }),
            options: QueryOptions {
                min_query_index: 3,
                ..QueryOptions::default()
            },
            ..IntentionQueryRequest::default()
        };
        assert_eq!(
            IntentionQueryRequest::decode(&query.encode()).unwrap(),
            query
        );
        let list = IntentionListRequest {
            legacy: true,
            ..IntentionListRequest::default()
        };
        assert_eq!(IntentionListRequest::decode(&list.encode()).unwrap(), list);
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        let mut too_many = Writer::new();
        let mut f = Fields::new(&mut too_many, 1);
        let m = f.field("Match");
        m.map_len(1);
        m.str("Entries");
        m.array_len(MATCH_ENTRIES_MAX + 1);
        for _ in 0..=MATCH_ENTRIES_MAX {
            m.nil();
        }
        f.finish();
        assert!(IntentionQueryRequest::decode(&too_many.into_inner()).is_err());
        for body in [
            &b""[..],
            b"\x81\xa9Intention\x81\xa9CreatedAt\x05",
            b"\xdf\xff",
        ] {
            assert!(IntentionRequest::decode(body).is_err());
        }
        for body in [&b""[..], b"\xdf\xff", b"\x81\xaaIntentions\x91\x05"] {
            assert!(read_indexed_intentions(body).is_err());
        }
    }
}
