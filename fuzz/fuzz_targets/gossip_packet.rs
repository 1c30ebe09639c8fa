//! Feeds arbitrary bytes to every gossip decoder: UDP packets (plain, encrypted with a
//! keyring, labeled), stream framing and stream messages, serf messages, push/pull user
//! state, tags, coordinates and LZW; then to a live gossip core as a packet and as a
//! stream. Nothing may panic, and framing may never claim more bytes than it was given.
#![no_main]

use std::sync::OnceLock;
use std::sync::Mutex;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use praetor::gossip::{Gossip, GossipConfig};
use praetor::proto::gossip::memberlist::{self as ml, Unseal};
use praetor::proto::gossip::serf::{self as sm, Coordinate, SerfMessage, SerfPushPull};
use praetor::proto::gossip::lzw;

const KEYS: &[Vec<u8>] = &[];

fn core() -> &'static Mutex<Gossip> {
    static CORE: OnceLock<Mutex<Gossip>> = OnceLock::new();
    CORE.get_or_init(|| {
        let cfg = GossipConfig::lan("fuzz", "127.0.0.20".parse().unwrap(), 18399);
        Mutex::new(Gossip::new(cfg, [7; 32], Duration::ZERO).unwrap())
    })
}

fuzz_target!(|data: &[u8]| {
    let keyring = vec![vec![1u8; 16], vec![2u8; 32]];
    for unseal in [
        Unseal { keys: KEYS, verify_incoming: true, label: "", skip_inbound_label_check: false },
        Unseal { keys: &keyring, verify_incoming: false, label: "", skip_inbound_label_check: false },
        Unseal { keys: KEYS, verify_incoming: true, label: "dc1", skip_inbound_label_check: true },
    ] {
        let _ = ml::open_packet(data, &unseal);
        let _ = ml::open_stream(data, &unseal, true);
        let _ = ml::open_stream(data, &unseal, false);
    }
    for accepting in [true, false] {
        if let Ok(Some(n)) = ml::stream_frame_len(data, accepting) {
            assert!(n <= data.len());
        }
    }
    let _ = SerfMessage::decode(data);
    let _ = SerfPushPull::decode(data);
    let _ = sm::decode_tags(data);
    let _ = sm::decode_filter(data);
    let _ = Coordinate::decode_ack_payload(data);
    if let Ok(out) = lzw::decompress(data, 1 << 20) {
        assert!(out.len() <= 1 << 20);
    }
    let mut g = core().lock().unwrap();
    let from = "127.0.0.21:18398".parse().unwrap();
    g.handle_packet(Duration::from_millis(1), from, data);
    let _ = g.handle_stream(Duration::from_millis(1), from, data);
    g.tick(Duration::from_millis(2));
    let _ = g.drain();
});
