//! serf's message layer (serf 0.9.4 `messages.go`, `delegate.go`, `ping_delegate.go`,
//! `internal_query.go`, `keymanager.go`), carried inside memberlist user messages and
//! push/pull user state. Each message is a type byte followed by a go-msgpack 0.5.5
//! encoded struct (sorted field names; see [`super::msgpack`]).
//!
//! Also here: node tags (`[255]` + msgpack map, serf `encodeTags`), the Vivaldi
//! coordinate carried in ack payloads (`[1]` + msgpack Coordinate), query filters and
//! the relay wrapper.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::msgpack::{Reader, WireError, Writer};

/// serf `messageType` values.
pub mod serf_type {
    pub const LEAVE: u8 = 0;
    pub const JOIN: u8 = 1;
    pub const PUSH_PULL: u8 = 2;
    pub const USER_EVENT: u8 = 3;
    pub const QUERY: u8 = 4;
    pub const QUERY_RESPONSE: u8 = 5;
    pub const CONFLICT_RESPONSE: u8 = 6;
    pub const KEY_REQUEST: u8 = 7;
    pub const KEY_RESPONSE: u8 = 8;
    pub const RELAY: u8 = 9;
}

/// serf `tagMagicByte`: tags are msgpack after this byte; otherwise meta is a bare role.
pub const TAG_MAGIC_BYTE: u8 = 255;
/// serf `PingVersion`: first byte of the coordinate ack payload.
pub const PING_VERSION: u8 = 1;
/// serf `queryFlagAck`.
pub const QUERY_FLAG_ACK: u32 = 1;
/// serf `queryFlagNoBroadcast`.
pub const QUERY_FLAG_NO_BROADCAST: u32 = 2;
/// serf `filterNodeType` / `filterTagType`.
pub const FILTER_NODE: u8 = 0;
pub const FILTER_TAG: u8 = 1;
/// serf `UserEventSizeLimit`: hard cap on event name + payload.
pub const USER_EVENT_BYTES_MAX: usize = 9 * 1024;
/// Most user events a push/pull may carry (serf's EventBuffer is 512 slots).
pub const PUSH_PULL_EVENTS_MAX: usize = 4096;
/// Largest coordinate dimensionality accepted from the wire (serf uses 8).
pub const COORDINATE_DIMENSIONS_MAX: usize = 64;

/// `messageJoin`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinIntent {
    pub ltime: u64,
    pub node: String,
}

/// `messageLeave`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveIntent {
    pub ltime: u64,
    pub node: String,
    pub prune: bool,
}

/// `userEvent` inside push/pull.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserEventItem {
    pub name: String,
    pub payload: Vec<u8>,
}

/// `userEvents`: the events seen at one Lamport time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserEventsAt {
    pub ltime: u64,
    pub events: Vec<UserEventItem>,
}

/// `messagePushPull`. `events` mirrors serf's fixed-size event buffer, whose empty slots
/// are encoded as nil.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SerfPushPull {
    pub ltime: u64,
    pub status_ltimes: Vec<(String, u64)>,
    pub left_members: Vec<String>,
    pub event_ltime: u64,
    pub events: Vec<Option<UserEventsAt>>,
    pub query_ltime: u64,
}

/// `messageUserEvent`; `cc` is "can coalesce".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserEventMsg {
    pub ltime: u64,
    pub name: String,
    pub payload: Vec<u8>,
    pub cc: bool,
}

/// `messageQuery`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryMsg {
    pub ltime: u64,
    pub id: u32,
    pub addr: Vec<u8>,
    pub port: u16,
    pub source_node: String,
    pub filters: Vec<Vec<u8>>,
    pub flags: u32,
    pub relay_factor: u8,
    /// Go `time.Duration` in nanoseconds.
    pub timeout_ns: i64,
    pub name: String,
    pub payload: Vec<u8>,
}

/// `messageQueryResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryResponseMsg {
    pub ltime: u64,
    pub id: u32,
    pub from: String,
    pub flags: u32,
    pub payload: Vec<u8>,
}

/// `keyRequest` (payload of `_serf_install-key` etc. after the type byte 7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyRequest {
    pub key: Vec<u8>,
}

/// `nodeKeyResponse` (query response payload after the type byte 8).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyResponse {
    pub result: bool,
    pub message: String,
    pub keys: Vec<String>,
    pub primary_key: String,
}

/// `filterTag`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TagFilter {
    pub tag: String,
    pub expr: String,
}

/// A decoded query filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryFilter {
    Nodes(Vec<String>),
    Tag(TagFilter),
}

/// serf `coordinate.Coordinate`.
#[derive(Debug, Clone, PartialEq)]
pub struct Coordinate {
    pub vec: Vec<f64>,
    pub error: f64,
    pub adjustment: f64,
    pub height: f64,
}

/// Every serf message that travels as a memberlist user message.
#[derive(Debug, Clone, PartialEq)]
pub enum SerfMessage {
    Leave(LeaveIntent),
    Join(JoinIntent),
    UserEvent(UserEventMsg),
    Query(QueryMsg),
    QueryResponse(QueryResponseMsg),
    /// `[9]{DestAddr, DestName}[inner message]`: forward `inner` to the destination.
    Relay {
        dest_ip: Vec<u8>,
        dest_port: u16,
        dest_name: String,
        inner: Vec<u8>,
    },
}

fn string(r: &mut Reader<'_>) -> Result<String, WireError> {
    Ok(r.str()?.to_owned())
}

fn string_array(r: &mut Reader<'_>) -> Result<Vec<String>, WireError> {
    let n = r.array_len()?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(string(r)?);
    }
    Ok(v)
}

impl JoinIntent {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(2);
        w.str("LTime");
        w.uint(self.ltime);
        w.str("Node");
        w.str(&self.node);
    }
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = JoinIntent::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "LTime" => m.ltime = r.u64("LTime")?,
                "Node" => m.node = string(r)?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl LeaveIntent {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(3);
        w.str("LTime");
        w.uint(self.ltime);
        w.str("Node");
        w.str(&self.node);
        w.str("Prune");
        w.bool(self.prune);
    }
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = LeaveIntent::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "LTime" => m.ltime = r.u64("LTime")?,
                "Node" => m.node = string(r)?,
                "Prune" => m.prune = r.bool()?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl UserEventMsg {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(4);
        w.str("CC");
        w.bool(self.cc);
        w.str("LTime");
        w.uint(self.ltime);
        w.str("Name");
        w.str(&self.name);
        w.str("Payload");
        // serf passes the caller's slice through; a nil payload stays nil.
        if self.payload.is_empty() {
            w.nil();
        } else {
            w.bytes(&self.payload);
        }
    }
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = UserEventMsg::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "LTime" => m.ltime = r.u64("LTime")?,
                "Name" => m.name = string(r)?,
                "Payload" => m.payload = r.bytes()?.to_vec(),
                "CC" => m.cc = r.bool()?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl QueryMsg {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(11);
        w.str("Addr");
        w.bytes(&self.addr);
        w.str("Filters");
        if self.filters.is_empty() {
            w.nil();
        } else {
            w.array_len(self.filters.len());
            for f in &self.filters {
                w.bytes(f);
            }
        }
        w.str("Flags");
        w.uint(self.flags as u64);
        w.str("ID");
        w.uint(self.id as u64);
        w.str("LTime");
        w.uint(self.ltime);
        w.str("Name");
        w.str(&self.name);
        w.str("Payload");
        if self.payload.is_empty() {
            w.nil();
        } else {
            w.bytes(&self.payload);
        }
        w.str("Port");
        w.uint(self.port as u64);
        w.str("RelayFactor");
        w.uint(self.relay_factor as u64);
        w.str("SourceNode");
        w.str(&self.source_node);
        w.str("Timeout");
        w.int(self.timeout_ns);
    }
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = QueryMsg::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "LTime" => m.ltime = r.u64("LTime")?,
                "ID" => m.id = r.u32("ID")?,
                "Addr" => m.addr = r.bytes()?.to_vec(),
                "Port" => m.port = r.u16("Port")?,
                "SourceNode" => m.source_node = string(r)?,
                "Filters" => {
                    let n = r.array_len()?;
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        v.push(r.bytes()?.to_vec());
                    }
                    m.filters = v;
                }
                "Flags" => m.flags = r.u32("Flags")?,
                "RelayFactor" => m.relay_factor = r.u8("RelayFactor")?,
                "Timeout" => m.timeout_ns = r.i64("Timeout")?,
                "Name" => m.name = string(r)?,
                "Payload" => m.payload = r.bytes()?.to_vec(),
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl QueryResponseMsg {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(5);
        w.str("Flags");
        w.uint(self.flags as u64);
        w.str("From");
        w.str(&self.from);
        w.str("ID");
        w.uint(self.id as u64);
        w.str("LTime");
        w.uint(self.ltime);
        w.str("Payload");
        if self.payload.is_empty() {
            w.nil();
        } else {
            w.bytes(&self.payload);
        }
    }
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = QueryResponseMsg::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "LTime" => m.ltime = r.u64("LTime")?,
                "ID" => m.id = r.u32("ID")?,
                "From" => m.from = string(r)?,
                "Flags" => m.flags = r.u32("Flags")?,
                "Payload" => m.payload = r.bytes()?.to_vec(),
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl KeyRequest {
    /// The query payload: `[7]{Key}`.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.buf.push(serf_type::KEY_REQUEST);
        w.map_len(1);
        w.str("Key");
        w.bytes(&self.key);
        w.into_inner()
    }
    /// Decodes the payload after its type byte (serf skips the byte without checking it).
    pub fn decode(payload: &[u8]) -> Result<Self, WireError> {
        let body = payload.get(1..).ok_or(WireError::Truncated)?;
        let mut r = Reader::new(body);
        let mut m = KeyRequest::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "Key" => m.key = r.bytes()?.to_vec(),
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl KeyResponse {
    /// The response payload: `[8]{Keys, Message, PrimaryKey, Result}`.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.buf.push(serf_type::KEY_RESPONSE);
        w.map_len(4);
        w.str("Keys");
        if self.keys.is_empty() {
            w.nil();
        } else {
            w.array_len(self.keys.len());
            for k in &self.keys {
                w.str(k);
            }
        }
        w.str("Message");
        w.str(&self.message);
        w.str("PrimaryKey");
        w.str(&self.primary_key);
        w.str("Result");
        w.bool(self.result);
        w.into_inner()
    }
    pub fn decode(payload: &[u8]) -> Result<Self, WireError> {
        match payload.first() {
            Some(&serf_type::KEY_RESPONSE) => {}
            Some(_) => return Err(WireError::Invalid("invalid key query response type")),
            None => return Err(WireError::Truncated),
        }
        let mut r = Reader::new(&payload[1..]);
        let mut m = KeyResponse::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "Result" => m.result = r.bool()?,
                "Message" => m.message = string(&mut r)?,
                "Keys" => m.keys = string_array(&mut r)?,
                "PrimaryKey" => m.primary_key = string(&mut r)?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

fn encode_events_at(w: &mut Writer, e: &UserEventsAt) {
    w.map_len(2);
    w.str("Events");
    w.array_len(e.events.len());
    for ev in &e.events {
        w.map_len(2);
        w.str("Name");
        w.str(&ev.name);
        w.str("Payload");
        if ev.payload.is_empty() {
            w.nil();
        } else {
            w.bytes(&ev.payload);
        }
    }
    w.str("LTime");
    w.uint(e.ltime);
}

fn decode_events_at(r: &mut Reader<'_>) -> Result<UserEventsAt, WireError> {
    let mut m = UserEventsAt::default();
    for _ in 0..r.map_len()? {
        match r.str()? {
            "LTime" => m.ltime = r.u64("LTime")?,
            "Events" => {
                let n = r.array_len()?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let mut item = UserEventItem::default();
                    for _ in 0..r.map_len()? {
                        match r.str()? {
                            "Name" => item.name = string(r)?,
                            "Payload" => item.payload = r.bytes()?.to_vec(),
                            _ => r.skip()?,
                        }
                    }
                    v.push(item);
                }
                m.events = v;
            }
            _ => r.skip()?,
        }
    }
    Ok(m)
}

impl SerfPushPull {
    /// `[2]` + body: the user state memberlist carries in push/pull.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_buf(Vec::with_capacity(64 + self.status_ltimes.len() * 24));
        w.buf.push(serf_type::PUSH_PULL);
        w.map_len(6);
        w.str("EventLTime");
        w.uint(self.event_ltime);
        w.str("Events");
        w.array_len(self.events.len());
        for e in &self.events {
            match e {
                Some(e) => encode_events_at(&mut w, e),
                None => w.nil(),
            }
        }
        w.str("LTime");
        w.uint(self.ltime);
        w.str("LeftMembers");
        w.array_len(self.left_members.len());
        for m in &self.left_members {
            w.str(m);
        }
        w.str("QueryLTime");
        w.uint(self.query_ltime);
        w.str("StatusLTimes");
        w.map_len(self.status_ltimes.len());
        for (name, t) in &self.status_ltimes {
            w.str(name);
            w.uint(*t);
        }
        w.into_inner()
    }

    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        match buf.first() {
            Some(&serf_type::PUSH_PULL) => {}
            Some(_) => return Err(WireError::Invalid("remote state has bad type prefix")),
            None => return Err(WireError::Invalid("remote state is zero bytes")),
        }
        let mut r = Reader::new(&buf[1..]);
        let mut m = SerfPushPull::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "LTime" => m.ltime = r.u64("LTime")?,
                "StatusLTimes" => {
                    let n = r.map_len()?;
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        let name = string(&mut r)?;
                        v.push((name, r.u64("StatusLTimes")?));
                    }
                    m.status_ltimes = v;
                }
                "LeftMembers" => m.left_members = string_array(&mut r)?,
                "EventLTime" => m.event_ltime = r.u64("EventLTime")?,
                "Events" => {
                    let n = r.array_len()?;
                    if n > PUSH_PULL_EVENTS_MAX {
                        return Err(WireError::TooLarge {
                            what: "push/pull events",
                            limit: PUSH_PULL_EVENTS_MAX,
                        });
                    }
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        if r.try_nil()? {
                            v.push(None);
                        } else {
                            v.push(Some(decode_events_at(&mut r)?));
                        }
                    }
                    m.events = v;
                }
                "QueryLTime" => m.query_ltime = r.u64("QueryLTime")?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl SerfMessage {
    /// serf `encodeMessage`: type byte + body.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_buf(Vec::with_capacity(64));
        match self {
            SerfMessage::Leave(m) => {
                w.buf.push(serf_type::LEAVE);
                m.encode_body(&mut w);
            }
            SerfMessage::Join(m) => {
                w.buf.push(serf_type::JOIN);
                m.encode_body(&mut w);
            }
            SerfMessage::UserEvent(m) => {
                w.buf.push(serf_type::USER_EVENT);
                m.encode_body(&mut w);
            }
            SerfMessage::Query(m) => {
                w.buf.push(serf_type::QUERY);
                m.encode_body(&mut w);
            }
            SerfMessage::QueryResponse(m) => {
                w.buf.push(serf_type::QUERY_RESPONSE);
                m.encode_body(&mut w);
            }
            SerfMessage::Relay {
                dest_ip,
                dest_port,
                dest_name,
                inner,
            } => {
                w.buf.push(serf_type::RELAY);
                // relayHeader{DestAddr net.UDPAddr{IP, Port, Zone}, DestName}
                w.map_len(2);
                w.str("DestAddr");
                w.map_len(3);
                w.str("IP");
                w.bytes(dest_ip);
                w.str("Port");
                w.int(*dest_port as i64);
                w.str("Zone");
                w.str("");
                w.str("DestName");
                w.str(dest_name);
                w.raw(inner);
            }
        }
        w.into_inner()
    }

    /// serf `delegate.NotifyMsg` decoding. Push/pull state is decoded separately.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let (&t, body) = buf.split_first().ok_or(WireError::Truncated)?;
        let mut r = Reader::new(body);
        Ok(match t {
            serf_type::LEAVE => SerfMessage::Leave(LeaveIntent::decode_body(&mut r)?),
            serf_type::JOIN => SerfMessage::Join(JoinIntent::decode_body(&mut r)?),
            serf_type::USER_EVENT => SerfMessage::UserEvent(UserEventMsg::decode_body(&mut r)?),
            serf_type::QUERY => SerfMessage::Query(QueryMsg::decode_body(&mut r)?),
            serf_type::QUERY_RESPONSE => {
                SerfMessage::QueryResponse(QueryResponseMsg::decode_body(&mut r)?)
            }
            serf_type::RELAY => {
                let mut dest_ip = Vec::new();
                let mut dest_port = 0u16;
                let mut dest_name = String::new();
                for _ in 0..r.map_len()? {
                    match r.str()? {
                        "DestAddr" => {
                            for _ in 0..r.map_len()? {
                                match r.str()? {
                                    "IP" => dest_ip = r.bytes()?.to_vec(),
                                    "Port" => dest_port = r.u16("Port")?,
                                    _ => r.skip()?,
                                }
                            }
                        }
                        "DestName" => dest_name = string(&mut r)?,
                        _ => r.skip()?,
                    }
                }
                SerfMessage::Relay {
                    dest_ip,
                    dest_port,
                    dest_name,
                    inner: r.rest().to_vec(),
                }
            }
            other => return Err(WireError::UnknownMessageType(other)),
        })
    }
}

/// serf `encodeTags` (protocol >= 3): `[255]` + msgpack map. Keys are sorted so the
/// bytes are deterministic (Go's map order is random, so any order is valid).
pub fn encode_tags(tags: &BTreeMap<String, String>) -> Vec<u8> {
    let mut w = Writer::new();
    w.buf.push(TAG_MAGIC_BYTE);
    w.map_len(tags.len());
    for (k, v) in tags {
        w.str(k);
        w.str(v);
    }
    w.into_inner()
}

/// serf `decodeTags`: meta without the magic byte is a bare role (protocol < 3).
pub fn decode_tags(meta: &[u8]) -> Result<BTreeMap<String, String>, WireError> {
    let mut tags = BTreeMap::new();
    if meta.first() != Some(&TAG_MAGIC_BYTE) {
        tags.insert(
            "role".to_owned(),
            String::from_utf8_lossy(meta).into_owned(),
        );
        return Ok(tags);
    }
    let mut r = Reader::new(&meta[1..]);
    for _ in 0..r.map_len()? {
        let k = String::from_utf8_lossy(r.bytes()?).into_owned();
        let v = String::from_utf8_lossy(r.bytes()?).into_owned();
        tags.insert(k, v);
    }
    Ok(tags)
}

impl Coordinate {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(4);
        w.str("Adjustment");
        w.f64(self.adjustment);
        w.str("Error");
        w.f64(self.error);
        w.str("Height");
        w.f64(self.height);
        w.str("Vec");
        w.array_len(self.vec.len());
        for x in &self.vec {
            w.f64(*x);
        }
    }

    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut c = Coordinate {
            vec: Vec::new(),
            error: 0.0,
            adjustment: 0.0,
            height: 0.0,
        };
        for _ in 0..r.map_len()? {
            match r.str()? {
                "Vec" => {
                    let n = r.array_len()?;
                    if n > COORDINATE_DIMENSIONS_MAX {
                        return Err(WireError::TooLarge {
                            what: "coordinate dimensions",
                            limit: COORDINATE_DIMENSIONS_MAX,
                        });
                    }
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        v.push(r.f64()?);
                    }
                    c.vec = v;
                }
                "Error" => c.error = r.f64()?,
                "Adjustment" => c.adjustment = r.f64()?,
                "Height" => c.height = r.f64()?,
                _ => r.skip()?,
            }
        }
        Ok(c)
    }

    /// serf `pingDelegate.AckPayload`: `[PingVersion]` + msgpack coordinate.
    pub fn encode_ack_payload(&self) -> Vec<u8> {
        let mut w = Writer::with_buf(Vec::with_capacity(128));
        w.buf.push(PING_VERSION);
        self.encode_body(&mut w);
        w.into_inner()
    }

    /// serf `pingDelegate.NotifyPingComplete` decoding.
    pub fn decode_ack_payload(payload: &[u8]) -> Result<Self, WireError> {
        match payload.first() {
            Some(&PING_VERSION) => Coordinate::decode_body(&mut Reader::new(&payload[1..])),
            Some(_) => Err(WireError::Invalid("unsupported ping version")),
            None => Err(WireError::Truncated),
        }
    }
}

/// serf `encodeFilter` for a node-name filter: `[0]` + msgpack array of names.
pub fn encode_node_filter(nodes: &[String]) -> Vec<u8> {
    let mut w = Writer::new();
    w.buf.push(FILTER_NODE);
    w.array_len(nodes.len());
    for n in nodes {
        w.str(n);
    }
    w.into_inner()
}

/// serf `encodeFilter` for a tag filter: `[1]{Expr, Tag}`.
pub fn encode_tag_filter(f: &TagFilter) -> Vec<u8> {
    let mut w = Writer::new();
    w.buf.push(FILTER_TAG);
    w.map_len(2);
    w.str("Expr");
    w.str(&f.expr);
    w.str("Tag");
    w.str(&f.tag);
    w.into_inner()
}

pub fn decode_filter(buf: &[u8]) -> Result<QueryFilter, WireError> {
    let (&t, body) = buf.split_first().ok_or(WireError::Truncated)?;
    let mut r = Reader::new(body);
    match t {
        FILTER_NODE => Ok(QueryFilter::Nodes(string_array(&mut r)?)),
        FILTER_TAG => {
            let mut f = TagFilter::default();
            for _ in 0..r.map_len()? {
                match r.str()? {
                    "Tag" => f.tag = string(&mut r)?,
                    "Expr" => f.expr = string(&mut r)?,
                    _ => r.skip()?,
                }
            }
            Ok(QueryFilter::Tag(f))
        }
        _ => Err(WireError::Invalid("unrecognized query filter type")),
    }
}

/// serf's `Member`, as sent in a conflict-query response (`[6]` + body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictMember {
    pub name: String,
    pub addr: IpAddr,
    pub port: u16,
    pub tags: BTreeMap<String, String>,
    pub status: i64,
    /// pmin, pmax, pcur, dmin, dmax, dcur.
    pub vsn: [u8; 6],
}

impl ConflictMember {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.buf.push(serf_type::CONFLICT_RESPONSE);
        w.map_len(11);
        w.str("Addr");
        w.bytes(&super::ip_to_wire(self.addr));
        w.str("DelegateCur");
        w.uint(self.vsn[5] as u64);
        w.str("DelegateMax");
        w.uint(self.vsn[4] as u64);
        w.str("DelegateMin");
        w.uint(self.vsn[3] as u64);
        w.str("Name");
        w.str(&self.name);
        w.str("Port");
        w.uint(self.port as u64);
        w.str("ProtocolCur");
        w.uint(self.vsn[2] as u64);
        w.str("ProtocolMax");
        w.uint(self.vsn[1] as u64);
        w.str("ProtocolMin");
        w.uint(self.vsn[0] as u64);
        w.str("Status");
        w.int(self.status);
        w.str("Tags");
        w.map_len(self.tags.len());
        for (k, v) in &self.tags {
            w.str(k);
            w.str(v);
        }
        w.into_inner()
    }
}
