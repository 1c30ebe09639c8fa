//! yamux sessions (`proto::yamux`) two ways.
//!
//! - As the server port meets them: the input after the first byte is a peer's bytes, fed
//!   to a server session in pieces; delivered data is consumed, and every stream the peer
//!   opens is answered and closed. Checked: nothing panics, streams stay within
//!   `STREAMS_MAX`, a failed session stays failed and says so again.
//! - Between two real sessions, when the first byte is odd: the input is a script of
//!   operations (open, send, close, reset, deliver either way, tick) on a client and a server
//!   session wired together. Checked: neither side ever fails, and each stream's bytes arrive
//!   in order, whole and only once, on the other side.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use praetor::proto::yamux::{Event, Role, Session, STREAMS_MAX};
use std::collections::HashMap;

fn peer_bytes(data: &[u8]) {
    let mut server = Session::new(Role::Server, 0);
    let mut input = BytesMut::new();
    let mut events = Vec::new();
    for (n, piece) in data.chunks(97).enumerate() {
        input.extend_from_slice(piece);
        events.clear();
        let result = server.receive(&mut input, &mut events);
        for event in &events {
            match event {
                Event::Data(id, bytes) => {
                    server.consumed(*id, bytes.len());
                    server.send(*id, bytes.clone());
                }
                Event::Opened(id) if n % 2 == 0 => server.close(*id),
                Event::Closed(id) => server.close(*id),
                _ => {}
            }
        }
        assert!(server.stream_count() <= STREAMS_MAX);
        if let Err(error) = result {
            assert!(!error.to_string().is_empty());
            assert_eq!(server.failure(), Some(&error));
            assert_eq!(server.receive(&mut input, &mut events), Err(error));
            return;
        }
        let _ = server.tick(n as u64 * 1000);
        server.take_outbox();
    }
}

/// Bytes received per stream, on each side.
#[derive(Default)]
struct Heard(HashMap<u32, Vec<u8>>);

/// Carries `from`'s outbox to `to`; returns how many bytes it carried.
fn deliver(from: &mut Session, to: &mut Session, heard: &mut Heard) -> usize {
    let mut input = from.take_outbox();
    let carried = input.len();
    let mut events = Vec::new();
    to.receive(&mut input, &mut events).expect("sessions agree");
    assert!(input.is_empty());
    for event in events {
        if let Event::Data(id, bytes) = event {
            to.consumed(id, bytes.len());
            heard.0.entry(id).or_default().extend_from_slice(&bytes);
        }
    }
    carried
}

/// Rounds the final drain may take: a script of at most 2,048 operations (libFuzzer's
/// 4,096-byte inputs) queues at most 2,048 sends of 536 KB, about 4,200 windows of 256 KiB,
/// far below this many rounds, so running out means the sessions never stop talking.
const DRAIN_ROUNDS_MAX: usize = 1 << 20;

fn two_sessions(script: &[u8]) {
    let mut client = Session::new(Role::Client, 0);
    let mut server = Session::new(Role::Server, 0);
    // What each side sent on each stream, in order.
    let mut sent_by_client: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut sent_by_server: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut heard_by_server = Heard::default();
    let mut heard_by_client = Heard::default();
    let mut reset = Vec::new();
    let mut opened: Vec<u32> = Vec::new();
    let mut counter = 0u8;
    let mut now_ms = 0u64;
    for pair in script.chunks(2) {
        let (op, arg) = (pair[0], *pair.get(1).unwrap_or(&0));
        let stream = opened.get(arg as usize % opened.len().max(1)).copied();
        match op % 8 {
            0 if opened.len() < 64 => {
                opened.push(client.open().expect("client opens"));
            }
            1 | 2 => {
                if let Some(id) = stream {
                    // Up to two windows' worth, so flow control is exercised.
                    let length = (arg as usize) * 2100 + 1;
                    counter = counter.wrapping_add(1);
                    let bytes = vec![counter; length];
                    let (side, sent) = if op % 8 == 1 {
                        (&mut client, &mut sent_by_client)
                    } else {
                        (&mut server, &mut sent_by_server)
                    };
                    if side.send(id, Bytes::from(bytes.clone())) {
                        sent.entry(id).or_default().extend_from_slice(&bytes);
                    }
                }
            }
            3 => {
                if let Some(id) = stream {
                    if arg % 2 == 0 {
                        client.close(id)
                    } else {
                        server.close(id)
                    }
                }
            }
            4 => {
                if let Some(id) = stream {
                    if arg % 3 == 0 {
                        client.reset(id);
                        server.reset(id);
                        reset.push(id);
                    }
                }
            }
            5 => {
                deliver(&mut client, &mut server, &mut heard_by_server);
            }
            6 => {
                deliver(&mut server, &mut client, &mut heard_by_client);
            }
            _ => {
                // Pings in flight are answered first (two rounds: a ping, then its
                // answer), so a keepalive never times out between live sessions.
                for _ in 0..2 {
                    deliver(&mut client, &mut server, &mut heard_by_server);
                    deliver(&mut server, &mut client, &mut heard_by_client);
                }
                now_ms += arg as u64 * 1000;
                client.tick(now_ms).expect("client keepalive");
                server.tick(now_ms).expect("server keepalive");
            }
        }
    }
    // Let everything drain: data waits only for window updates, which flow back, so once
    // a round carries nothing either way nothing more will come. A fixed number of rounds
    // was too few for scripts that queue more than that many windows on one stream.
    let mut drained = false;
    for _ in 0..DRAIN_ROUNDS_MAX {
        let carried = deliver(&mut client, &mut server, &mut heard_by_server)
            + deliver(&mut server, &mut client, &mut heard_by_client);
        if carried == 0 {
            drained = true;
            break;
        }
    }
    assert!(drained, "the sessions kept exchanging frames without end");
    for (sent, heard) in [
        (&sent_by_client, &heard_by_server),
        (&sent_by_server, &heard_by_client),
    ] {
        for (id, bytes) in sent {
            if reset.contains(id) {
                continue;
            }
            let got = heard.0.get(id).map(Vec::as_slice).unwrap_or(&[]);
            assert_eq!(got.len(), bytes.len(), "stream {id}: bytes lost or doubled");
            assert!(got == bytes.as_slice(), "stream {id}: bytes out of order");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 1 {
        two_sessions(rest);
    } else {
        peer_bytes(rest);
    }
});
