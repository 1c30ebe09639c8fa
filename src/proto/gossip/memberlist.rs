//! memberlist's message layer: the message-type byte, each message's msgpack body, and
//! the containers (compound, compress, CRC, label, encryption) that wrap them on UDP and
//! TCP. Field names and order are go-msgpack 0.5.5's (sorted Go field names); see
//! [`super::msgpack`] for the encoding rules and memberlist's `net.go` / `util.go` /
//! `security.go` / `label.go` for the framing this module reproduces.
//!
//! Invariant: every decoder here takes untrusted bytes and returns an error rather than
//! panicking; sizes are bounded by the explicit `*_MAX` constants below.

use super::lzw;
use super::msgpack::{Reader, WireError, Writer};
use super::security;

/// Message-type bytes (memberlist `messageType`; only ever appended to upstream).
pub mod msg_type {
    pub const PING: u8 = 0;
    pub const INDIRECT_PING: u8 = 1;
    pub const ACK_RESP: u8 = 2;
    pub const SUSPECT: u8 = 3;
    pub const ALIVE: u8 = 4;
    pub const DEAD: u8 = 5;
    pub const PUSH_PULL: u8 = 6;
    pub const COMPOUND: u8 = 7;
    pub const USER: u8 = 8;
    pub const COMPRESS: u8 = 9;
    pub const ENCRYPT: u8 = 10;
    pub const NACK_RESP: u8 = 11;
    pub const HAS_CRC: u8 = 12;
    pub const ERR: u8 = 13;
    /// Label header; deliberately far from the other values and from encryption versions.
    pub const HAS_LABEL: u8 = 244;
}

/// memberlist `MetaMaxSize`: node metadata (serf tags) may not exceed this.
pub const META_BYTES_MAX: usize = 512;
/// memberlist `LabelMaxSize`.
pub const LABEL_BYTES_MAX: usize = 255;
/// memberlist `maxPushStateBytes`: the largest encrypted stream payload accepted.
pub const STREAM_BYTES_MAX: usize = 20 * 1024 * 1024;
/// Largest number of node states accepted in one push/pull (memberlist v0.5
/// `maxPushStateNodes`).
pub const PUSH_PULL_NODES_MAX: usize = 1024 * 1024;
/// Largest plaintext a compressed UDP packet may expand to. A 64 KiB datagram of 12-bit
/// LZW codes could in theory expand ~40x further, but no honest packet does: memberlist
/// packets are at most `UDPBufferSize` (1400) bytes before compression.
pub const PACKET_DECOMPRESSED_BYTES_MAX: usize = 1024 * 1024;
/// How deeply compound/compress containers may nest inside one packet. memberlist only
/// ever produces compress(compound(msgs)) or compound(msgs), so 4 is generous.
pub const CONTAINER_DEPTH_MAX: usize = 4;
/// Assumed header overhead of a compound message (memberlist `compoundHeaderOverhead`).
pub const COMPOUND_HEADER_OVERHEAD: usize = 2;
/// Per-part overhead in a compound message (memberlist `compoundOverhead`).
pub const COMPOUND_PART_OVERHEAD: usize = 2;
/// Most parts a compound message can carry (the count is one byte).
pub const COMPOUND_PARTS_MAX: usize = 255;

/// `ping`: sent directly to a node; `Node` lets the target check it is the intended one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ping {
    pub seq_no: u32,
    pub node: String,
    pub source_addr: Vec<u8>,
    pub source_port: u16,
    pub source_node: String,
}

/// `indirectPingReq`: ask a peer to ping `target` for us.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndirectPingReq {
    pub seq_no: u32,
    pub target: Vec<u8>,
    pub port: u16,
    pub node: String,
    pub nack: bool,
    pub source_addr: Vec<u8>,
    pub source_port: u16,
    pub source_node: String,
}

/// `ackResp`. `payload` is nil (None) unless a ping delegate adds one (serf: coordinate).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AckResp {
    pub seq_no: u32,
    pub payload: Option<Vec<u8>>,
}

/// `nackResp`: an indirect prober heard nothing from the target in time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NackResp {
    pub seq_no: u32,
}

/// `errResp`: a stream peer reporting why it refused our request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrResp {
    pub error: String,
}

/// `suspect` (also the shape of `dead`: Incarnation, Node, From).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Suspect {
    pub incarnation: u32,
    pub node: String,
    pub from: String,
}

/// `dead`; `from == node` means the node left gracefully.
pub type Dead = Suspect;

/// `alive`: also how a node joins and how it refutes suspicion.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Alive {
    pub incarnation: u32,
    pub node: String,
    pub addr: Vec<u8>,
    pub port: u16,
    /// Node metadata (serf's encoded tags). None is Go's nil slice.
    pub meta: Option<Vec<u8>>,
    /// pmin, pmax, pcur, dmin, dmax, dcur.
    pub vsn: Vec<u8>,
}

/// `pushPullHeader`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PushPullHeader {
    pub nodes: usize,
    pub user_state_len: usize,
    pub join: bool,
}

/// memberlist `NodeStateType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeStateKind {
    Alive = 0,
    Suspect = 1,
    Dead = 2,
    Left = 3,
}

impl NodeStateKind {
    pub fn from_wire(v: i64) -> Result<Self, WireError> {
        Ok(match v {
            0 => NodeStateKind::Alive,
            1 => NodeStateKind::Suspect,
            2 => NodeStateKind::Dead,
            3 => NodeStateKind::Left,
            _ => return Err(WireError::Invalid("unknown node state")),
        })
    }
}

/// `pushNodeState`: one entry of a push/pull exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushNodeState {
    pub name: String,
    pub addr: Vec<u8>,
    pub port: u16,
    pub meta: Option<Vec<u8>>,
    pub incarnation: u32,
    pub state: NodeStateKind,
    pub vsn: Vec<u8>,
}

/// A message carried in a UDP packet after containers are removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Ping(Ping),
    IndirectPing(IndirectPingReq),
    Ack(AckResp),
    Nack(NackResp),
    Suspect(Suspect),
    Alive(Alive),
    Dead(Dead),
    /// A delegate (serf) message, payload without the type byte.
    User(Vec<u8>),
}

// ---------------------------------------------------------------------------------------
// Encoding (sorted field order; omitempty where memberlist declares it)

impl Ping {
    pub fn encode_body(&self, w: &mut Writer) {
        let n = 2
            + usize::from(!self.source_addr.is_empty())
            + usize::from(!self.source_node.is_empty())
            + usize::from(self.source_port != 0);
        w.map_len(n);
        w.str("Node");
        w.str(&self.node);
        w.str("SeqNo");
        w.uint(self.seq_no as u64);
        if !self.source_addr.is_empty() {
            w.str("SourceAddr");
            w.bytes(&self.source_addr);
        }
        if !self.source_node.is_empty() {
            w.str("SourceNode");
            w.str(&self.source_node);
        }
        if self.source_port != 0 {
            w.str("SourcePort");
            w.uint(self.source_port as u64);
        }
    }
}

impl IndirectPingReq {
    pub fn encode_body(&self, w: &mut Writer) {
        let n = 5
            + usize::from(!self.source_addr.is_empty())
            + usize::from(!self.source_node.is_empty())
            + usize::from(self.source_port != 0);
        w.map_len(n);
        w.str("Nack");
        w.bool(self.nack);
        w.str("Node");
        w.str(&self.node);
        w.str("Port");
        w.uint(self.port as u64);
        w.str("SeqNo");
        w.uint(self.seq_no as u64);
        if !self.source_addr.is_empty() {
            w.str("SourceAddr");
            w.bytes(&self.source_addr);
        }
        if !self.source_node.is_empty() {
            w.str("SourceNode");
            w.str(&self.source_node);
        }
        if self.source_port != 0 {
            w.str("SourcePort");
            w.uint(self.source_port as u64);
        }
        w.str("Target");
        w.bytes(&self.target);
    }
}

impl AckResp {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(2);
        w.str("Payload");
        w.opt_bytes(self.payload.as_deref());
        w.str("SeqNo");
        w.uint(self.seq_no as u64);
    }
}

impl NackResp {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(1);
        w.str("SeqNo");
        w.uint(self.seq_no as u64);
    }
}

impl ErrResp {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(1);
        w.str("Error");
        w.str(&self.error);
    }
}

impl Suspect {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(3);
        w.str("From");
        w.str(&self.from);
        w.str("Incarnation");
        w.uint(self.incarnation as u64);
        w.str("Node");
        w.str(&self.node);
    }
}

impl Alive {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(6);
        w.str("Addr");
        w.bytes(&self.addr);
        w.str("Incarnation");
        w.uint(self.incarnation as u64);
        w.str("Meta");
        w.opt_bytes(self.meta.as_deref());
        w.str("Node");
        w.str(&self.node);
        w.str("Port");
        w.uint(self.port as u64);
        w.str("Vsn");
        w.bytes(&self.vsn);
    }
}

impl PushPullHeader {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(3);
        w.str("Join");
        w.bool(self.join);
        w.str("Nodes");
        w.uint(self.nodes as u64);
        w.str("UserStateLen");
        w.uint(self.user_state_len as u64);
    }
}

impl PushNodeState {
    pub fn encode_body(&self, w: &mut Writer) {
        w.map_len(7);
        w.str("Addr");
        w.bytes(&self.addr);
        w.str("Incarnation");
        w.uint(self.incarnation as u64);
        w.str("Meta");
        w.opt_bytes(self.meta.as_deref());
        w.str("Name");
        w.str(&self.name);
        w.str("Port");
        w.uint(self.port as u64);
        w.str("State");
        w.int(self.state as i64);
        w.str("Vsn");
        w.bytes(&self.vsn);
    }
}

impl Message {
    pub fn type_byte(&self) -> u8 {
        match self {
            Message::Ping(_) => msg_type::PING,
            Message::IndirectPing(_) => msg_type::INDIRECT_PING,
            Message::Ack(_) => msg_type::ACK_RESP,
            Message::Nack(_) => msg_type::NACK_RESP,
            Message::Suspect(_) => msg_type::SUSPECT,
            Message::Alive(_) => msg_type::ALIVE,
            Message::Dead(_) => msg_type::DEAD,
            Message::User(_) => msg_type::USER,
        }
    }

    /// The type byte followed by the msgpack body (memberlist `encode`).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_buf(Vec::with_capacity(64));
        w.buf.push(self.type_byte());
        match self {
            Message::Ping(m) => m.encode_body(&mut w),
            Message::IndirectPing(m) => m.encode_body(&mut w),
            Message::Ack(m) => m.encode_body(&mut w),
            Message::Nack(m) => m.encode_body(&mut w),
            Message::Suspect(m) => m.encode_body(&mut w),
            Message::Alive(m) => m.encode_body(&mut w),
            Message::Dead(m) => m.encode_body(&mut w),
            Message::User(payload) => w.raw(payload),
        }
        w.into_inner()
    }
}

// ---------------------------------------------------------------------------------------
// Decoding

fn string(r: &mut Reader<'_>) -> Result<String, WireError> {
    Ok(r.str()?.to_owned())
}

impl Ping {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = Ping::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "SeqNo" => m.seq_no = r.u32("SeqNo")?,
                "Node" => m.node = string(r)?,
                "SourceAddr" => m.source_addr = r.bytes()?.to_vec(),
                "SourcePort" => m.source_port = r.u16("SourcePort")?,
                "SourceNode" => m.source_node = string(r)?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl IndirectPingReq {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = IndirectPingReq::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "SeqNo" => m.seq_no = r.u32("SeqNo")?,
                "Target" => m.target = r.bytes()?.to_vec(),
                "Port" => m.port = r.u16("Port")?,
                "Node" => m.node = string(r)?,
                "Nack" => m.nack = r.bool()?,
                "SourceAddr" => m.source_addr = r.bytes()?.to_vec(),
                "SourcePort" => m.source_port = r.u16("SourcePort")?,
                "SourceNode" => m.source_node = string(r)?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl AckResp {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = AckResp::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "SeqNo" => m.seq_no = r.u32("SeqNo")?,
                "Payload" => m.payload = r.opt_bytes()?.map(<[u8]>::to_vec),
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl NackResp {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = NackResp::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "SeqNo" => m.seq_no = r.u32("SeqNo")?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl ErrResp {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = ErrResp::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "Error" => m.error = String::from_utf8_lossy(r.bytes()?).into_owned(),
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl Suspect {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = Suspect::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "Incarnation" => m.incarnation = r.u32("Incarnation")?,
                "Node" => m.node = string(r)?,
                "From" => m.from = string(r)?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl Alive {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = Alive::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "Incarnation" => m.incarnation = r.u32("Incarnation")?,
                "Node" => m.node = string(r)?,
                "Addr" => m.addr = r.bytes()?.to_vec(),
                "Port" => m.port = r.u16("Port")?,
                "Meta" => m.meta = r.opt_bytes()?.map(<[u8]>::to_vec),
                "Vsn" => m.vsn = vsn(r)?,
                _ => r.skip()?,
            }
        }
        if m.meta
            .as_ref()
            .is_some_and(|meta| meta.len() > META_BYTES_MAX)
        {
            return Err(WireError::TooLarge {
                what: "node meta",
                limit: META_BYTES_MAX,
            });
        }
        Ok(m)
    }
}

/// `Vsn` is a Go `[]uint8`, which go-msgpack writes as a byte string; an array of small
/// integers is accepted too in case a peer's encoder treats it as a list.
fn vsn(r: &mut Reader<'_>) -> Result<Vec<u8>, WireError> {
    let m = r.peek()?;
    if (0x90..=0x9f).contains(&m) || m == 0xdc || m == 0xdd {
        let n = r.array_len()?;
        let mut v = Vec::with_capacity(n.min(16));
        for _ in 0..n {
            v.push(r.u8("Vsn")?);
        }
        Ok(v)
    } else {
        Ok(r.bytes()?.to_vec())
    }
}

impl PushPullHeader {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = PushPullHeader::default();
        for _ in 0..r.map_len()? {
            match r.str()? {
                "Nodes" => {
                    let n = r.i64("Nodes")?;
                    if n < 0 || n as u64 > PUSH_PULL_NODES_MAX as u64 {
                        return Err(WireError::TooLarge {
                            what: "push/pull node count",
                            limit: PUSH_PULL_NODES_MAX,
                        });
                    }
                    m.nodes = n as usize;
                }
                "UserStateLen" => {
                    let n = r.i64("UserStateLen")?;
                    if n < 0 || n as u64 > STREAM_BYTES_MAX as u64 {
                        return Err(WireError::TooLarge {
                            what: "push/pull user state",
                            limit: STREAM_BYTES_MAX,
                        });
                    }
                    m.user_state_len = n as usize;
                }
                "Join" => m.join = r.bool()?,
                _ => r.skip()?,
            }
        }
        Ok(m)
    }
}

impl PushNodeState {
    pub fn decode_body(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let mut m = PushNodeState {
            name: String::new(),
            addr: Vec::new(),
            port: 0,
            meta: None,
            incarnation: 0,
            state: NodeStateKind::Alive,
            vsn: Vec::new(),
        };
        for _ in 0..r.map_len()? {
            match r.str()? {
                "Name" => m.name = string(r)?,
                "Addr" => m.addr = r.bytes()?.to_vec(),
                "Port" => m.port = r.u16("Port")?,
                "Meta" => m.meta = r.opt_bytes()?.map(<[u8]>::to_vec),
                "Incarnation" => m.incarnation = r.u32("Incarnation")?,
                "State" => m.state = NodeStateKind::from_wire(r.i64("State")?)?,
                "Vsn" => m.vsn = vsn(r)?,
                _ => r.skip()?,
            }
        }
        if m.meta
            .as_ref()
            .is_some_and(|meta| meta.len() > META_BYTES_MAX)
        {
            return Err(WireError::TooLarge {
                what: "node meta",
                limit: META_BYTES_MAX,
            });
        }
        Ok(m)
    }
}

/// `compress`: {Algo, Buf}; Algo 0 is LZW (LSB, 8-bit literals).
fn decode_compress(r: &mut Reader<'_>, out_max: usize) -> Result<Vec<u8>, WireError> {
    let mut algo = 0u64;
    let mut buf: &[u8] = &[];
    for _ in 0..r.map_len()? {
        match r.str()? {
            "Algo" => algo = r.u64("Algo")?,
            "Buf" => buf = r.bytes()?,
            _ => r.skip()?,
        }
    }
    if algo != 0 {
        return Err(WireError::Invalid("unknown compression algorithm"));
    }
    lzw::decompress(buf, out_max)
}

/// Wraps `payload` (type byte included) in a compress message (memberlist
/// `compressPayload`).
pub fn compress_payload(payload: &[u8]) -> Vec<u8> {
    let packed = lzw::compress(payload);
    let mut w = Writer::with_buf(Vec::with_capacity(packed.len() + 16));
    w.buf.push(msg_type::COMPRESS);
    w.map_len(2);
    w.str("Algo");
    w.uint(0);
    w.str("Buf");
    w.bytes(&packed);
    w.into_inner()
}

/// Decodes one plain message whose type byte is `t` and body is in `r`.
fn decode_plain(t: u8, body: &[u8]) -> Result<Message, WireError> {
    let mut r = Reader::new(body);
    Ok(match t {
        msg_type::PING => Message::Ping(Ping::decode_body(&mut r)?),
        msg_type::INDIRECT_PING => Message::IndirectPing(IndirectPingReq::decode_body(&mut r)?),
        msg_type::ACK_RESP => Message::Ack(AckResp::decode_body(&mut r)?),
        msg_type::NACK_RESP => Message::Nack(NackResp::decode_body(&mut r)?),
        msg_type::SUSPECT => Message::Suspect(Suspect::decode_body(&mut r)?),
        msg_type::ALIVE => Message::Alive(Alive::decode_body(&mut r)?),
        msg_type::DEAD => Message::Dead(Suspect::decode_body(&mut r)?),
        msg_type::USER => Message::User(body.to_vec()),
        other => return Err(WireError::UnknownMessageType(other)),
    })
}

// ---------------------------------------------------------------------------------------
// Containers

/// memberlist `makeCompoundMessage`: `[7][count][len u16 BE]*[parts]*`.
/// Callers keep to [`COMPOUND_PARTS_MAX`] parts of at most 65535 bytes each.
pub fn make_compound(parts: &[&[u8]]) -> Vec<u8> {
    debug_assert!(parts.len() <= COMPOUND_PARTS_MAX);
    let total: usize = parts.iter().map(|p| p.len() + 2).sum();
    let mut buf = Vec::with_capacity(2 + total);
    buf.push(msg_type::COMPOUND);
    buf.push(parts.len() as u8);
    for p in parts {
        debug_assert!(p.len() <= u16::MAX as usize);
        buf.extend_from_slice(&(p.len() as u16).to_be_bytes());
    }
    for p in parts {
        buf.extend_from_slice(p);
    }
    buf
}

/// memberlist `decodeCompoundMessage` (input excludes the type byte). Returns the parts
/// and how many were cut off by truncation.
pub fn decode_compound(buf: &[u8]) -> Result<(Vec<&[u8]>, usize), WireError> {
    let (&count, rest) = buf
        .split_first()
        .ok_or(WireError::Invalid("missing compound length byte"))?;
    let count = count as usize;
    if rest.len() < count * 2 {
        return Err(WireError::Invalid("truncated compound length slice"));
    }
    let (lens, mut body) = rest.split_at(count * 2);
    let mut parts = Vec::with_capacity(count);
    for (i, l) in lens.chunks_exact(2).enumerate() {
        let len = u16::from_be_bytes([l[0], l[1]]) as usize;
        if body.len() < len {
            return Ok((parts, count - i));
        }
        let (part, tail) = body.split_at(len);
        parts.push(part);
        body = tail;
    }
    Ok((parts, 0))
}

/// Prefixes `[12][crc32 IEEE BE]` (memberlist adds it when the peer's PMax >= 5).
pub fn add_crc(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 5);
    out.push(msg_type::HAS_CRC);
    out.extend_from_slice(&crc32fast::hash(msg).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

/// `[244][len][label]`; empty labels add nothing (memberlist `AddLabelHeaderToPacket`).
pub fn label_header(label: &str) -> Vec<u8> {
    if label.is_empty() {
        return Vec::new();
    }
    debug_assert!(label.len() <= LABEL_BYTES_MAX);
    let mut out = Vec::with_capacity(2 + label.len());
    out.push(msg_type::HAS_LABEL);
    out.push(label.len() as u8);
    out.extend_from_slice(label.as_bytes());
    out
}

/// Splits a label header off a packet or stream prefix (memberlist
/// `RemoveLabelHeaderFromPacket`). Returns (label, rest); no header means an empty label.
pub fn strip_label(buf: &[u8]) -> Result<(&[u8], &[u8]), WireError> {
    match buf.first() {
        Some(&msg_type::HAS_LABEL) => {
            let size = *buf.get(1).ok_or(WireError::Truncated)? as usize;
            if size == 0 {
                return Err(WireError::Invalid(
                    "label header cannot be empty when present",
                ));
            }
            if buf.len() < 2 + size {
                return Err(WireError::Truncated);
            }
            Ok((&buf[2..2 + size], &buf[2 + size..]))
        }
        _ => Ok((&[], buf)),
    }
}

/// How a node seals its outgoing UDP packets.
#[derive(Debug, Clone, Copy)]
pub struct PacketSeal<'a> {
    /// LZW-compress when that makes the packet smaller (memberlist `EnableCompression`).
    pub compress: bool,
    /// Prefix a CRC (the receiver speaks protocol >= 5).
    pub crc: bool,
    /// Encrypt with this primary key (keyring configured and `GossipVerifyOutgoing`).
    pub key: Option<&'a [u8]>,
    /// Encryption version: 1 for protocol >= 2 (no padding), 0 otherwise.
    pub encryption_version: u8,
    /// Cluster label ("" for none); authenticated as additional data when encrypting.
    pub label: &'a str,
}

/// memberlist `rawSendMsgPacket`: compress, CRC, encrypt, then label, in that order.
pub fn seal_packet(msg: Vec<u8>, seal: &PacketSeal<'_>, nonce: [u8; 12]) -> Vec<u8> {
    let mut msg = msg;
    if seal.compress {
        let packed = compress_payload(&msg);
        if packed.len() < msg.len() {
            msg = packed;
        }
    }
    if seal.crc {
        msg = add_crc(&msg);
    }
    let mut out = label_header(seal.label);
    match seal.key {
        Some(key) => {
            security::encrypt_payload(
                seal.encryption_version,
                key,
                &msg,
                seal.label.as_bytes(),
                nonce,
                &mut out,
            );
        }
        None => out.extend_from_slice(&msg),
    }
    out
}

/// How a node opens incoming packets and streams.
#[derive(Debug, Clone, Copy)]
pub struct Unseal<'a> {
    /// The keyring (primary first); empty when encryption is off.
    pub keys: &'a [Vec<u8>],
    /// memberlist `GossipVerifyIncoming`: refuse plaintext when a keyring is set.
    pub verify_incoming: bool,
    /// The label this node expects ("" for none).
    pub label: &'a str,
    /// memberlist `SkipInboundLabelCheck`: accept unlabeled input as ours.
    pub skip_inbound_label_check: bool,
}

impl Unseal<'_> {
    fn check_label(&self, got: &[u8]) -> Result<(), WireError> {
        if self.skip_inbound_label_check {
            if !got.is_empty() {
                return Err(WireError::Invalid("unexpected double label header"));
            }
            return Ok(());
        }
        if got != self.label.as_bytes() {
            return Err(WireError::Invalid(
                "discarding input with unacceptable label",
            ));
        }
        Ok(())
    }
}

/// Everything recovered from one UDP packet: the messages in order, and errors for the
/// parts that could not be decoded (memberlist logs those and carries on with the rest).
#[derive(Debug, Default)]
pub struct PacketContents {
    pub messages: Vec<Message>,
    pub errors: Vec<WireError>,
}

/// memberlist `ingestPacket` + `handleCommand` without the handling: label, decrypt,
/// CRC, then compound/compress recursion.
pub fn open_packet(buf: &[u8], unseal: &Unseal<'_>) -> Result<PacketContents, WireError> {
    let (label, rest) = strip_label(buf)?;
    unseal.check_label(label)?;
    let label = if unseal.skip_inbound_label_check {
        unseal.label.as_bytes()
    } else {
        label
    };
    let plain_owned;
    let mut plain: &[u8] = rest;
    if !unseal.keys.is_empty() {
        match security::decrypt_payload(unseal.keys, rest, label) {
            Ok(p) => {
                plain_owned = p;
                plain = &plain_owned;
            }
            Err(e) => {
                if unseal.verify_incoming {
                    return Err(e);
                }
            }
        }
    }
    if plain.len() >= 5 && plain[0] == msg_type::HAS_CRC {
        let expected = u32::from_be_bytes([plain[1], plain[2], plain[3], plain[4]]);
        if crc32fast::hash(&plain[5..]) != expected {
            return Err(WireError::Invalid("invalid CRC checksum on packet"));
        }
        plain = &plain[5..];
    }
    let mut contents = PacketContents::default();
    handle_command(plain, 0, &mut contents);
    Ok(contents)
}

fn handle_command(buf: &[u8], depth: usize, out: &mut PacketContents) {
    let Some((&t, body)) = buf.split_first() else {
        out.errors.push(WireError::Invalid("empty message"));
        return;
    };
    match t {
        msg_type::COMPOUND | msg_type::COMPRESS if depth >= CONTAINER_DEPTH_MAX => {
            out.errors.push(WireError::TooDeep);
        }
        msg_type::COMPOUND => match decode_compound(body) {
            Ok((parts, truncated)) => {
                if truncated > 0 {
                    out.errors
                        .push(WireError::Invalid("compound message had truncated parts"));
                }
                for part in parts {
                    handle_command(part, depth + 1, out);
                }
            }
            Err(e) => out.errors.push(e),
        },
        msg_type::COMPRESS => {
            match decode_compress(&mut Reader::new(body), PACKET_DECOMPRESSED_BYTES_MAX) {
                Ok(inner) => handle_command(&inner, depth + 1, out),
                Err(e) => out.errors.push(e),
            }
        }
        _ => match decode_plain(t, body) {
            Ok(m) => out.messages.push(m),
            Err(e) => out.errors.push(e),
        },
    }
}

// ---------------------------------------------------------------------------------------
// Streams (TCP)

/// A message read from a stream connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamMessage {
    PushPull {
        join: bool,
        nodes: Vec<PushNodeState>,
        user_state: Vec<u8>,
    },
    Ping(Ping),
    Ack(AckResp),
    User(Vec<u8>),
    Err(ErrResp),
}

/// Encodes a push/pull message (memberlist `sendLocalState` before sealing).
pub fn encode_push_pull(join: bool, nodes: &[PushNodeState], user_state: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_buf(Vec::with_capacity(64 + nodes.len() * 96 + user_state.len()));
    w.buf.push(msg_type::PUSH_PULL);
    PushPullHeader {
        nodes: nodes.len(),
        user_state_len: user_state.len(),
        join,
    }
    .encode_body(&mut w);
    for n in nodes {
        n.encode_body(&mut w);
    }
    w.raw(user_state);
    w.into_inner()
}

/// Encodes a stream user message: `[8]{UserMsgLen}` then the raw payload.
pub fn encode_stream_user(payload: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_buf(Vec::with_capacity(16 + payload.len()));
    w.buf.push(msg_type::USER);
    w.map_len(1);
    w.str("UserMsgLen");
    w.uint(payload.len() as u64);
    w.raw(payload);
    w.into_inner()
}

/// Encodes an error reply for a stream.
pub fn encode_err(error: &str) -> Vec<u8> {
    let mut w = Writer::new();
    w.buf.push(msg_type::ERR);
    ErrResp {
        error: error.to_owned(),
    }
    .encode_body(&mut w);
    w.into_inner()
}

/// How a node seals what it writes on a stream (memberlist `rawSendMsgStream`).
#[derive(Debug, Clone, Copy)]
pub struct StreamSeal<'a> {
    pub compress: bool,
    pub key: Option<&'a [u8]>,
    pub encryption_version: u8,
    /// Label used as additional data when encrypting.
    pub label: &'a str,
    /// Whether to write the label header first: only the side that dials does.
    pub write_label_header: bool,
}

/// Compress, then encrypt as `[10][len u32 BE][ciphertext]` with the 5-byte header plus
/// the label as additional data, with the label header in front when dialing.
pub fn seal_stream(payload: Vec<u8>, seal: &StreamSeal<'_>, nonce: [u8; 12]) -> Vec<u8> {
    let mut payload = payload;
    if seal.compress {
        payload = compress_payload(&payload);
    }
    let mut out = if seal.write_label_header {
        label_header(seal.label)
    } else {
        Vec::new()
    };
    match seal.key {
        Some(key) => {
            let start = out.len();
            out.push(msg_type::ENCRYPT);
            let enc_len = security::encrypted_length(seal.encryption_version, payload.len());
            out.extend_from_slice(&(enc_len as u32).to_be_bytes());
            let mut aad = out[start..start + 5].to_vec();
            aad.extend_from_slice(seal.label.as_bytes());
            security::encrypt_payload(
                seal.encryption_version,
                key,
                &payload,
                &aad,
                nonce,
                &mut out,
            );
        }
        None => out.extend_from_slice(&payload),
    }
    out
}

/// How many bytes the first complete stream message in `buf` occupies, or None when
/// more bytes are needed. `expect_label_header` is true on the accepting side, where
/// the dialer may have sent a label header first.
pub fn stream_frame_len(buf: &[u8], expect_label_header: bool) -> Result<Option<usize>, WireError> {
    let mut offset = 0;
    if expect_label_header {
        match strip_label(buf) {
            Ok((label, _)) => {
                if !label.is_empty() {
                    offset = 2 + label.len();
                }
            }
            Err(WireError::Truncated) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    let body = &buf[offset..];
    let Some(&t) = body.first() else {
        return Ok(None);
    };
    let len = if t == msg_type::ENCRYPT {
        if body.len() < 5 {
            return Ok(None);
        }
        let n = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if n > STREAM_BYTES_MAX {
            return Err(WireError::TooLarge {
                what: "encrypted stream payload",
                limit: STREAM_BYTES_MAX,
            });
        }
        if body.len() < 5 + n {
            return Ok(None);
        }
        5 + n
    } else {
        match plain_stream_len(body) {
            Ok(n) => n,
            Err(WireError::Truncated) => {
                if body.len() > STREAM_BYTES_MAX {
                    return Err(WireError::TooLarge {
                        what: "stream message",
                        limit: STREAM_BYTES_MAX,
                    });
                }
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    };
    Ok(Some(offset + len))
}

/// Length of a plaintext stream message (type byte included) or `Truncated`.
fn plain_stream_len(body: &[u8]) -> Result<usize, WireError> {
    let t = body[0];
    let mut r = Reader::new(&body[1..]);
    match t {
        msg_type::COMPRESS | msg_type::PING | msg_type::ACK_RESP | msg_type::ERR => r.skip()?,
        msg_type::PUSH_PULL => {
            let header = PushPullHeader::decode_body(&mut r)?;
            for _ in 0..header.nodes {
                r.skip()?;
            }
            r.take(header.user_state_len)?;
        }
        msg_type::USER => {
            let len = user_header(&mut r)?;
            r.take(len)?;
        }
        other => return Err(WireError::UnknownMessageType(other)),
    }
    Ok(1 + r.position())
}

fn user_header(r: &mut Reader<'_>) -> Result<usize, WireError> {
    let mut len = 0usize;
    for _ in 0..r.map_len()? {
        match r.str()? {
            "UserMsgLen" => {
                let n = r.i64("UserMsgLen")?;
                if n < 0 || n as u64 > STREAM_BYTES_MAX as u64 {
                    return Err(WireError::TooLarge {
                        what: "user message",
                        limit: STREAM_BYTES_MAX,
                    });
                }
                len = n as usize;
            }
            _ => r.skip()?,
        }
    }
    Ok(len)
}

/// memberlist `readStream` + the per-type decoding of `handleConn` /
/// `sendAndReceiveState`. `buf` is one frame as measured by [`stream_frame_len`];
/// `expect_label_header` as there.
pub fn open_stream(
    buf: &[u8],
    unseal: &Unseal<'_>,
    expect_label_header: bool,
) -> Result<StreamMessage, WireError> {
    let mut body = buf;
    let mut label: &[u8] = unseal.label.as_bytes();
    if expect_label_header {
        let (got, rest) = strip_label(buf)?;
        unseal.check_label(got)?;
        if !unseal.skip_inbound_label_check {
            label = got;
        }
        body = rest;
    }
    let (&t, rest) = body.split_first().ok_or(WireError::Truncated)?;
    let plain_owned;
    let mut plain = body;
    if t == msg_type::ENCRYPT {
        if unseal.keys.is_empty() {
            return Err(WireError::Invalid(
                "remote state is encrypted and encryption is not configured",
            ));
        }
        if rest.len() < 4 {
            return Err(WireError::Truncated);
        }
        let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if n > STREAM_BYTES_MAX {
            return Err(WireError::TooLarge {
                what: "encrypted stream payload",
                limit: STREAM_BYTES_MAX,
            });
        }
        if rest.len() < 4 + n {
            return Err(WireError::Truncated);
        }
        let mut aad = body[..5].to_vec();
        aad.extend_from_slice(label);
        plain_owned = security::decrypt_payload(unseal.keys, &rest[4..4 + n], &aad)?;
        plain = &plain_owned;
    } else if !unseal.keys.is_empty() && unseal.verify_incoming {
        return Err(WireError::Invalid(
            "encryption is configured but remote state is not encrypted",
        ));
    }
    let decompressed;
    if plain.first() == Some(&msg_type::COMPRESS) {
        decompressed = decode_compress(&mut Reader::new(&plain[1..]), STREAM_BYTES_MAX)?;
        plain = &decompressed;
    }
    let (&t, rest) = plain.split_first().ok_or(WireError::Truncated)?;
    let mut r = Reader::new(rest);
    Ok(match t {
        msg_type::PUSH_PULL => {
            let header = PushPullHeader::decode_body(&mut r)?;
            // Each node state is a map with at least one byte, so the count is bounded
            // by the input before we allocate for it.
            if header.nodes > r.remaining() {
                return Err(WireError::Truncated);
            }
            let mut nodes = Vec::with_capacity(header.nodes);
            for _ in 0..header.nodes {
                nodes.push(PushNodeState::decode_body(&mut r)?);
            }
            let user_state = r.take(header.user_state_len)?.to_vec();
            StreamMessage::PushPull {
                join: header.join,
                nodes,
                user_state,
            }
        }
        msg_type::PING => StreamMessage::Ping(Ping::decode_body(&mut r)?),
        msg_type::ACK_RESP => StreamMessage::Ack(AckResp::decode_body(&mut r)?),
        msg_type::ERR => StreamMessage::Err(ErrResp::decode_body(&mut r)?),
        msg_type::USER => {
            let len = user_header(&mut r)?;
            StreamMessage::User(r.take(len)?.to_vec())
        }
        other => return Err(WireError::UnknownMessageType(other)),
    })
}
