//! Consul's msgpack net/rpc stream as the server port reads it (`proto::msgpack_rpc`): the
//! input is cut into pieces at points taken from its first bytes, fed to a
//! `MessageReader` as they would arrive, and every complete call's header is decoded and its
//! body read by the typed decoders of the method it names (`consul::rpc`).
//!
//! Checked on every input: nothing panics; a message is found exactly where a reader fed
//! the whole stream at once finds it (cutting never changes the answer); every extent lies
//! within the bytes that arrived; a found body is one msgpack value that the plain reader
//! skips exactly; the limits hold (no message over `MESSAGE_BYTES_MAX`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use praetor::proto::msgpack::Reader;
use praetor::proto::msgpack_rpc::{
    decode_request_header, MessageExtent, MessageReader, MESSAGE_BYTES_MAX,
};

/// Reads every message of `stream` arriving in pieces that end at `cuts` (ascending).
fn read_all(stream: &[u8], cuts: &[usize]) -> (Vec<MessageExtent>, bool) {
    let mut reader = MessageReader::new();
    let mut found = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&stream.len())) {
        let end = end.clamp(start, stream.len());
        loop {
            match reader.advance(&stream[start..end]) {
                Ok(Some(extent)) => {
                    assert!(start + extent.total() <= end, "an extent past the bytes");
                    assert!(extent.header_length <= MESSAGE_BYTES_MAX);
                    assert!(extent.body_length <= MESSAGE_BYTES_MAX);
                    found.push(extent);
                    start += extent.total();
                }
                Ok(None) => break,
                Err(error) => {
                    assert!(!error.to_string().is_empty());
                    return (found, true);
                }
            }
        }
    }
    (found, false)
}

fuzz_target!(|data: &[u8]| {
    let (cut_bytes, stream) = data.split_at(data.len().min(4));
    let mut cuts: Vec<usize> = cut_bytes
        .iter()
        .map(|b| *b as usize * stream.len() / 256)
        .collect();
    cuts.sort_unstable();
    let (whole, whole_failed) = read_all(stream, &[]);
    let (pieces, pieces_failed) = read_all(stream, &cuts);
    assert_eq!(whole, pieces, "cutting changed the messages found");
    assert_eq!(whole_failed, pieces_failed);
    let mut start = 0;
    for extent in whole {
        let header = &stream[start..start + extent.header_length];
        let body = &stream[start + extent.header_length..start + extent.total()];
        start += extent.total();
        let mut skipper = Reader::new(body);
        if skipper.skip().is_ok() {
            assert_eq!(skipper.position(), body.len(), "a body is one value");
        }
        if let Ok(header) = decode_request_header(header) {
            praetor::consul::rpc::decode_any(header.method, body);
        }
    }
});
