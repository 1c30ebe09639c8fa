//! Writing DNS responses by hand.
//!
//! A response is the header, an echo of the question exactly as received (so its name sits
//! uncompressed at offset 12), then resource records. Names in records are compressed against
//! the question only: an owner equal to the question name is the pointer `0xC00C`, and any
//! other name writes the labels that differ and points at the longest suffix it shares with
//! the question (`web.node.dc1.consul` after a question `web.service.consul` writes
//! `web.node.dc1` and a pointer to `consul`). Because the pointers depend only on the
//! question's label lengths, records encoded for one query are valid for every query whose
//! name differs only in letter case, which is what lets the server cache encoded answers.

use super::{WireName, HEADER_BYTES};

/// Offset of the question name in every response.
pub const QUESTION_NAME_OFFSET: u16 = HEADER_BYTES as u16;
/// A compression pointer to the question name.
pub const POINTER_TO_QUESTION: [u8; 2] = [0xC0, QUESTION_NAME_OFFSET as u8];
/// Highest offset a compression pointer can reach (14 bits).
pub const POINTER_OFFSET_MAX: usize = 0x3FFF;

/// Header flags and section counts of a response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub questions: u16,
    pub answers: u16,
    pub authorities: u16,
    pub additionals: u16,
}

/// Writes the 12-byte header.
pub fn write_header(out: &mut Vec<u8>, id: u16, flags: u16, counts: Counts) {
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&counts.questions.to_be_bytes());
    out.extend_from_slice(&counts.answers.to_be_bytes());
    out.extend_from_slice(&counts.authorities.to_be_bytes());
    out.extend_from_slice(&counts.additionals.to_be_bytes());
}

/// Overwrites the flags and counts of a header written earlier at `message[0..12]`.
pub fn patch_header(message: &mut [u8], flags: u16, counts: Counts) {
    message[2..4].copy_from_slice(&flags.to_be_bytes());
    message[4..6].copy_from_slice(&counts.questions.to_be_bytes());
    message[6..8].copy_from_slice(&counts.answers.to_be_bytes());
    message[8..10].copy_from_slice(&counts.authorities.to_be_bytes());
    message[10..12].copy_from_slice(&counts.additionals.to_be_bytes());
}

/// Writes the question section entry (name uncompressed, as received).
pub fn write_question(out: &mut Vec<u8>, name: &WireName, qtype: u16, qclass: u16) {
    debug_assert_eq!(out.len(), HEADER_BYTES, "the question follows the header");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&qclass.to_be_bytes());
}

/// Compresses names against the question name (see the module docs).
pub struct QuestionCompressor {
    /// The question's labels, lowercased, with the offset of each label within the message.
    labels: Vec<(u16, Box<[u8]>)>,
}

impl QuestionCompressor {
    pub fn new(question: &WireName) -> QuestionCompressor {
        let mut labels = Vec::new();
        let mut offset = QUESTION_NAME_OFFSET;
        for label in question.labels() {
            labels.push((offset, label.to_ascii_lowercase().into_boxed_slice()));
            offset += 1 + label.len() as u16;
        }
        QuestionCompressor { labels }
    }

    /// Writes `name`, compressed against the question where a suffix matches.
    pub fn write_name(&self, out: &mut Vec<u8>, name: &WireName) {
        let labels: Vec<&[u8]> = name.labels().collect();
        // Longest common suffix, compared case-insensitively.
        let mut shared = 0;
        while shared < labels.len()
            && shared < self.labels.len()
            && labels[labels.len() - 1 - shared]
                .eq_ignore_ascii_case(&self.labels[self.labels.len() - 1 - shared].1)
        {
            shared += 1;
        }
        for label in &labels[..labels.len() - shared] {
            out.push(label.len() as u8);
            out.extend_from_slice(label);
        }
        if shared == 0 {
            out.push(0);
        } else {
            let offset = self.labels[self.labels.len() - shared].0;
            debug_assert!(offset as usize <= POINTER_OFFSET_MAX);
            out.extend_from_slice(&(0xC000 | offset).to_be_bytes());
        }
    }
}

/// Writes a record's type, class and TTL after its owner name, and a placeholder RDLENGTH;
/// returns the position of the placeholder for [`finish_rdata`].
pub fn begin_rdata(out: &mut Vec<u8>, rtype: u16, class: u16, ttl: u32) -> usize {
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&class.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.len() - 2
}

/// Fills in the RDLENGTH placeholder written by [`begin_rdata`].
pub fn finish_rdata(out: &mut [u8], rdlength_at: usize) {
    let length = out.len() - rdlength_at - 2;
    debug_assert!(length <= u16::MAX as usize);
    out[rdlength_at..rdlength_at + 2].copy_from_slice(&(length as u16).to_be_bytes());
}

/// Writes an OPT pseudo-record (RFC 6891 §6.1.2) with no options.
pub fn write_opt(out: &mut Vec<u8>, udp_payload_bytes: u16, extended_rcode: u8, dnssec_ok: bool) {
    out.push(0);
    out.extend_from_slice(&super::rtype::OPT.to_be_bytes());
    out.extend_from_slice(&udp_payload_bytes.to_be_bytes());
    out.push(extended_rcode);
    out.push(0); // version 0
    out.push(if dnssec_ok { 0x80 } else { 0 });
    out.push(0);
    out.extend_from_slice(&[0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::dns::{class, rtype};

    #[test]
    fn names_compress_against_the_question() {
        let question = WireName::from_dotted("Web.Service.Consul").unwrap();
        let compressor = QuestionCompressor::new(&question);
        let mut out = vec![0u8; 12];
        write_question(&mut out, &question, rtype::SRV, class::IN);
        let mut name = Vec::new();
        compressor.write_name(
            &mut name,
            &WireName::from_dotted("n1.node.dc1.consul").unwrap(),
        );
        // "consul" starts at 12 + 4 + 8 = 24.
        assert_eq!(name, b"\x02n1\x04node\x03dc1\xc0\x18");
        name.clear();
        compressor.write_name(
            &mut name,
            &WireName::from_dotted("web.service.consul").unwrap(),
        );
        assert_eq!(name, POINTER_TO_QUESTION);
        name.clear();
        compressor.write_name(&mut name, &WireName::from_dotted("example.org").unwrap());
        assert_eq!(name, b"\x07example\x03org\x00");
    }
}
