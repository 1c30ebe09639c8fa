//! Answers: what resolution produces, its encoded (cacheable) form, and the assembly of a
//! response from it for one query.
//!
//! An [`Answer`] is a list of answer *units* — an answer record plus the additional records
//! that support it (an SRV or NS target's address) — and the authority and additional
//! sections. [`EncodedAnswer::encode`] writes every record once, compressed against the
//! question (see `proto::dns::writer`); [`EncodedAnswer::assemble`] then builds each response
//! by copying chunks: it shuffles the units when asked, applies the UDP answer limit and the
//! size limit, writes the additional records of the units that fit, and adds the OPT record.
//!
//! Invariants: an assembled response never exceeds the size limit it is given, except that
//! the first answer is always sent (as Consul does); a unit's additional records appear only
//! if its answer does; the TC bit is set only when answers were dropped and truncation is
//! enabled.

use crate::proto::dns::writer::{
    begin_rdata, finish_rdata, patch_header, write_header, write_opt, write_question, Counts,
    QuestionCompressor, POINTER_OFFSET_MAX,
};
use crate::proto::dns::{class, flags, rtype, Query, WireName, OPT_RECORD_BYTES};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;

/// The data of one record. Names are held inline (256 bytes): records exist only while an
/// answer is being encoded on a cache miss, so their size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Cname(WireName),
    Ptr(WireName),
    Ns(WireName),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: WireName,
    },
    Txt(Vec<Vec<u8>>),
    Soa {
        mname: WireName,
        rname: WireName,
        serial: u32,
        refresh: u32,
        retry: u32,
        expire: u32,
        minimum: u32,
    },
}

impl RecordData {
    fn rtype(&self) -> u16 {
        match self {
            RecordData::A(_) => rtype::A,
            RecordData::Aaaa(_) => rtype::AAAA,
            RecordData::Cname(_) => rtype::CNAME,
            RecordData::Ptr(_) => rtype::PTR,
            RecordData::Ns(_) => rtype::NS,
            RecordData::Srv { .. } => rtype::SRV,
            RecordData::Txt(_) => rtype::TXT,
            RecordData::Soa { .. } => rtype::SOA,
        }
    }
}

/// Who owns a record.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The question name (written as a pointer to it).
    Question,
    Name(WireName),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub owner: Owner,
    pub ttl: u32,
    pub data: RecordData,
}

/// An answer record and the additional records owned by its target (SRV/NS glue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    pub answer: Record,
    /// Records owned by the answer's target name; their owner is not written by the resolver.
    pub extras: Vec<RecordData>,
    pub extras_ttl: u32,
}

/// The result of resolving one question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub rcode: u16,
    pub units: Vec<Unit>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
    /// Shuffle the units in every response (service lookups).
    pub shuffle: bool,
}

impl Answer {
    pub fn empty(rcode: u16) -> Answer {
        Answer {
            rcode,
            units: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            shuffle: false,
        }
    }
}

/// One encoded unit: byte ranges into [`EncodedAnswer::bytes`].
#[derive(Clone, Debug)]
struct EncodedUnit {
    answer: Range<u32>,
    /// Where the uncompressed target name sits within the answer chunk, if it has extras.
    target: Range<u16>,
    /// Extra records encoded from their TYPE field on (the owner is written at assembly).
    extras: Range<u32>,
    extra_count: u16,
    /// Length of each extra chunk, in order.
    extra_lengths: Vec<u16>,
}

/// An answer encoded once for every query with the same question name (up to case).
#[derive(Clone, Debug)]
pub struct EncodedAnswer {
    pub rcode: u16,
    bytes: Vec<u8>,
    units: Vec<EncodedUnit>,
    authority: Vec<Range<u32>>,
    additional: Vec<Range<u32>>,
    shuffle: bool,
}

/// How a response must be limited.
#[derive(Clone, Copy, Debug)]
pub struct ResponseLimits {
    /// Largest response, in bytes (512 or the EDNS size over UDP; 65535 over TCP).
    pub message_bytes_max: usize,
    /// Most answer units (`udp_answer_limit` for plain UDP), if limited.
    pub answers_max: Option<usize>,
    /// Set TC when answers were dropped (`enable_truncate`).
    pub set_truncated: bool,
    /// Set RA (recursors are configured).
    pub recursion_available: bool,
}

/// A small, fast generator for shuffling (xorshift64*); quality is ample for load spreading.
#[derive(Clone, Debug)]
pub struct ShuffleRng(u64);

impl ShuffleRng {
    pub fn new(seed: u64) -> ShuffleRng {
        ShuffleRng(seed | 1)
    }
    pub fn below(&mut self, bound: usize) -> usize {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        ((x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as usize * bound) >> 32
    }
}

fn write_record_body(out: &mut Vec<u8>, data: &RecordData, ttl: u32, names: &QuestionCompressor) {
    let at = begin_rdata(out, data.rtype(), class::IN, ttl);
    match data {
        RecordData::A(ip) => out.extend_from_slice(&ip.octets()),
        RecordData::Aaaa(ip) => out.extend_from_slice(&ip.octets()),
        RecordData::Cname(name) | RecordData::Ptr(name) => names.write_name(out, name),
        // Written uncompressed so that glue owners can point at (or copy) it.
        RecordData::Ns(name) => out.extend_from_slice(name.as_bytes()),
        RecordData::Srv {
            priority,
            weight,
            port,
            target,
        } => {
            out.extend_from_slice(&priority.to_be_bytes());
            out.extend_from_slice(&weight.to_be_bytes());
            out.extend_from_slice(&port.to_be_bytes());
            // RFC 2782: the target is never compressed.
            out.extend_from_slice(target.as_bytes());
        }
        RecordData::Txt(strings) => {
            for string in strings {
                for chunk in string.chunks(255) {
                    out.push(chunk.len() as u8);
                    out.extend_from_slice(chunk);
                }
                if string.is_empty() {
                    out.push(0);
                }
            }
        }
        RecordData::Soa {
            mname,
            rname,
            serial,
            refresh,
            retry,
            expire,
            minimum,
        } => {
            names.write_name(out, mname);
            names.write_name(out, rname);
            for value in [serial, refresh, retry, expire, minimum] {
                out.extend_from_slice(&value.to_be_bytes());
            }
        }
    }
    finish_rdata(out, at);
}

fn write_owned_record(out: &mut Vec<u8>, record: &Record, names: &QuestionCompressor) {
    match &record.owner {
        Owner::Question => out.extend_from_slice(&crate::proto::dns::writer::POINTER_TO_QUESTION),
        Owner::Name(name) => names.write_name(out, name),
    }
    write_record_body(out, &record.data, record.ttl, names);
}

/// Offset of the target name inside an answer record's RDATA, for records with extras.
fn target_in_rdata(data: &RecordData) -> Option<(usize, usize)> {
    match data {
        RecordData::Srv { target, .. } => Some((6, target.as_bytes().len())),
        RecordData::Ns(name) => Some((0, name.as_bytes().len())),
        _ => None,
    }
}

impl EncodedAnswer {
    /// Encodes `answer` for questions named `question` (any letter case).
    pub fn encode(answer: &Answer, question: &WireName) -> EncodedAnswer {
        let names = QuestionCompressor::new(question);
        let mut bytes = Vec::with_capacity(64 * (answer.units.len() + 1));
        let mut units = Vec::with_capacity(answer.units.len());
        for unit in &answer.units {
            let start = bytes.len();
            write_owned_record(&mut bytes, &unit.answer, &names);
            let end = bytes.len();
            let rdata_start = end - rdata_length(&bytes[start..end]);
            let target = match (target_in_rdata(&unit.answer.data), unit.extras.is_empty()) {
                (Some((offset, len)), false) => {
                    let from = rdata_start - start + offset;
                    from as u16..(from + len) as u16
                }
                _ => 0..0,
            };
            let extras_start = bytes.len();
            let mut extra_lengths = Vec::with_capacity(unit.extras.len());
            if !target.is_empty() {
                for extra in &unit.extras {
                    let before = bytes.len();
                    write_record_body(&mut bytes, extra, unit.extras_ttl, &names);
                    extra_lengths.push((bytes.len() - before) as u16);
                }
            }
            units.push(EncodedUnit {
                answer: start as u32..end as u32,
                target,
                extras: extras_start as u32..bytes.len() as u32,
                extra_count: extra_lengths.len() as u16,
                extra_lengths,
            });
        }
        let section = |records: &[Record], bytes: &mut Vec<u8>| -> Vec<Range<u32>> {
            records
                .iter()
                .map(|record| {
                    let start = bytes.len();
                    write_owned_record(bytes, record, &names);
                    start as u32..bytes.len() as u32
                })
                .collect()
        };
        let authority = section(&answer.authority, &mut bytes);
        let additional = section(&answer.additional, &mut bytes);
        EncodedAnswer {
            rcode: answer.rcode,
            bytes,
            units,
            authority,
            additional,
            shuffle: answer.shuffle,
        }
    }

    /// Number of answer units before any limit.
    pub fn unit_count(&self) -> usize {
        self.units.len()
    }

    /// Approximate heap footprint, for the cache's byte budget.
    pub fn footprint_bytes(&self) -> usize {
        self.bytes.len()
            + self.units.len() * std::mem::size_of::<EncodedUnit>()
            + self
                .units
                .iter()
                .map(|u| u.extra_lengths.len() * 2)
                .sum::<usize>()
            + (self.authority.len() + self.additional.len()) * 8
    }

    /// Writes the response to `query` into `out` (cleared first).
    pub fn assemble(
        &self,
        query: &Query,
        limits: &ResponseLimits,
        rng: &mut ShuffleRng,
        order: &mut Vec<u32>,
        out: &mut Vec<u8>,
    ) {
        out.clear();
        write_header(out, query.id, 0, Counts::default());
        write_question(out, &query.name, query.qtype, query.qclass);
        let opt_bytes = if query.edns.is_some() {
            OPT_RECORD_BYTES
        } else {
            0
        };
        let budget = limits.message_bytes_max.saturating_sub(opt_bytes);
        let total = self.units.len();
        let wanted = limits.answers_max.map_or(total, |m| m.min(total));
        let chosen = self.choose_units(rng, order, wanted, out.len(), budget);
        let mut counts = Counts {
            questions: 1,
            ..Counts::default()
        };
        // Where the answers start: each unit's target offset (for its glue's pointer) is found
        // again below by walking the same order, so the hit path allocates nothing.
        let answers_at = out.len();
        for &index in &order[..chosen.units] {
            let unit = &self.units[index as usize];
            out.extend_from_slice(
                &self.bytes[unit.answer.start as usize..unit.answer.end as usize],
            );
            counts.answers += 1;
        }
        let truncated = chosen.units < total;
        for range in &self.authority {
            let chunk = &self.bytes[range.start as usize..range.end as usize];
            if out.len() + chunk.len() + chosen.extra_bytes > budget {
                break;
            }
            out.extend_from_slice(chunk);
            counts.authorities += 1;
        }
        if chosen.include_extras {
            self.write_unit_extras(&order[..chosen.units], answers_at, &mut counts, out);
        }
        for range in &self.additional {
            let chunk = &self.bytes[range.start as usize..range.end as usize];
            if out.len() + chunk.len() > budget {
                break;
            }
            out.extend_from_slice(chunk);
            counts.additionals += 1;
        }
        let rcode = self.rcode;
        finish_response(
            query,
            rcode,
            truncated && limits.set_truncated,
            limits,
            counts,
            out,
        );
    }

    /// Chooses the units that fit `budget` after the `base` bytes already written, into
    /// `order[..units]`: shuffled lazily (a partial Fisher–Yates), so that a response that
    /// fits 3 of 5,000 instances costs 3 draws, not 5,000.
    fn choose_units(
        &self,
        rng: &mut ShuffleRng,
        order: &mut Vec<u32>,
        wanted: usize,
        base: usize,
        budget: usize,
    ) -> Chosen {
        let total = self.units.len();
        debug_assert!(wanted <= total);
        order.clear();
        order.extend(0..total as u32);
        let mut chosen = Chosen {
            units: 0,
            extra_bytes: 0,
            include_extras: true,
        };
        let mut answer_bytes = 0usize;
        while chosen.units < wanted {
            if self.shuffle {
                let pick = chosen.units + rng.below(total - chosen.units);
                order.swap(chosen.units, pick);
            }
            let unit = &self.units[order[chosen.units] as usize];
            let answer_len = (unit.answer.end - unit.answer.start) as usize;
            let target_at = base + answer_bytes + unit.target.start as usize;
            let owner_len = if target_at <= POINTER_OFFSET_MAX {
                2
            } else {
                unit.target.len()
            };
            let extras_len = (unit.extras.end - unit.extras.start) as usize
                + owner_len * unit.extra_count as usize;
            if base + answer_bytes + answer_len + chosen.extra_bytes + extras_len > budget {
                if chosen.units == 0 {
                    // Even a first answer that does not fit with its extras is sent (without
                    // them), as Consul does: one answer beats none.
                    chosen.include_extras = false;
                    chosen.units = 1;
                }
                break;
            }
            answer_bytes += answer_len;
            chosen.extra_bytes += extras_len;
            chosen.units += 1;
        }
        debug_assert!(chosen.include_extras || chosen.extra_bytes == 0);
        debug_assert!(chosen.units <= total);
        chosen
    }

    /// Writes the chosen units' extras (glue), each owned by its answer's target: a
    /// compression pointer to it when in reach, else the target spelled out.
    fn write_unit_extras(
        &self,
        chosen: &[u32],
        answers_at: usize,
        counts: &mut Counts,
        out: &mut Vec<u8>,
    ) {
        let mut answer_at = answers_at;
        for &index in chosen {
            let unit = &self.units[index as usize];
            let target_at = answer_at + unit.target.start as usize;
            answer_at += (unit.answer.end - unit.answer.start) as usize;
            if unit.extra_count == 0 {
                continue;
            }
            let mut at = unit.extras.start as usize;
            for &length in &unit.extra_lengths {
                if target_at <= POINTER_OFFSET_MAX {
                    out.extend_from_slice(&(0xC000 | target_at as u16).to_be_bytes());
                } else {
                    let target = unit.answer.start as usize + unit.target.start as usize
                        ..unit.answer.start as usize + unit.target.end as usize;
                    out.extend_from_slice(&self.bytes[target]);
                }
                out.extend_from_slice(&self.bytes[at..at + length as usize]);
                at += length as usize;
                counts.additionals += 1;
            }
        }
    }
}

/// The units an assembled response carries: the first `units` of the order, with the
/// bytes their extras take and whether they fit at all.
struct Chosen {
    units: usize,
    extra_bytes: usize,
    include_extras: bool,
}

/// Writes the OPT record (when the query had one) and the final header flags and counts.
fn finish_response(
    query: &Query,
    rcode: u16,
    truncated: bool,
    limits: &ResponseLimits,
    mut counts: Counts,
    out: &mut Vec<u8>,
) {
    if let Some(edns) = query.edns {
        // Echo the client's payload size (at least 512), as Consul does.
        let size = edns.udp_payload_bytes;
        write_opt(out, size, (rcode >> 4) as u8, edns.dnssec_ok);
        counts.additionals += 1;
    }
    let mut header_flags = flags::QR
        | flags::AA
        | (query.flags & (flags::OPCODE_MASK | flags::RD | flags::CD))
        | (rcode & 0xF);
    if truncated {
        header_flags |= flags::TC;
    }
    if limits.recursion_available {
        header_flags |= flags::RA;
    }
    patch_header(out, header_flags, counts);
}

/// A response with no records: errors (FORMERR, REFUSED, NOTIMP, SERVFAIL) and BADVERS.
/// The question is echoed when the query was decoded.
pub fn write_bare_response(
    query: &Query,
    rcode: u16,
    authoritative: bool,
    recursion_available: bool,
    out: &mut Vec<u8>,
) {
    out.clear();
    write_header(out, query.id, 0, Counts::default());
    write_question(out, &query.name, query.qtype, query.qclass);
    let limits = ResponseLimits {
        message_bytes_max: crate::proto::dns::MESSAGE_BYTES_MAX,
        answers_max: None,
        set_truncated: false,
        recursion_available,
    };
    finish_response(
        query,
        rcode,
        false,
        &limits,
        Counts {
            questions: 1,
            ..Counts::default()
        },
        out,
    );
    if !authoritative {
        let flags = u16::from_be_bytes([out[2], out[3]]) & !flags::AA;
        out[2..4].copy_from_slice(&flags.to_be_bytes());
    }
}

/// A response to a message that could not be decoded: header only, no question.
pub fn write_header_only_response(id: u16, request_flags: u16, rcode: u16, out: &mut Vec<u8>) {
    out.clear();
    let flags =
        flags::QR | (request_flags & (flags::OPCODE_MASK | flags::RD | flags::CD)) | (rcode & 0xF);
    write_header(out, id, flags, Counts::default());
}

/// The RDATA length of a complete record chunk (its last RDLENGTH bytes).
fn rdata_length(record: &[u8]) -> usize {
    // The chunk is owner | type | class | ttl | rdlength | rdata; walk the owner name.
    let mut at = 0;
    loop {
        let len = record[at];
        if len & 0xC0 == 0xC0 {
            at += 2;
            break;
        }
        at += 1 + len as usize;
        if len == 0 {
            break;
        }
    }
    u16::from_be_bytes([record[at + 8], record[at + 9]]) as usize
}
