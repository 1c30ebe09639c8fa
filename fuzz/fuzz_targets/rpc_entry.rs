//! Garbage at the door of every TLS-capable listener: the server port's first-byte protocol
//! selection (`proto::rpc_select`) under every listener policy, then what the selected path
//! reads — praetor's request frames, Raft frames and their messages, or a TLS session
//! accepted by `tls::stream::accept` with praetor's own rustls configurations (client
//! certificates required, as under `verify_incoming`) — and the HTTPS listener's entry, where
//! the first record is classified (`proto::tls_record`) and a plaintext HTTP request gets
//! Go's 400.
//!
//! Checked on every input: nothing panics; a verifying listener never lets a plaintext
//! protocol through; TLS never nests; a handshake from a peer that has said everything and
//! closed ends with an error (never a hang, never a session: a forged handshake cannot
//! finish); the 400 answer is sent exactly when the first record is a plaintext request on
//! an HTTPS listener.
//!
//! Input: one mode byte (bit 0 `verify_incoming`, bit 1 a certificate is configured, bit 2
//! auto-encrypt's insecure TLS allowed, bit 3 the HTTPS listener instead of the server
//! port), then the bytes the peer sends.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use praetor::config::tls::{CaSource, ProtocolTls, TlsConfig};
use praetor::proto::rpc::{decode_frame, kind};
use praetor::proto::rpc_select::{select, Layer, ListenerPolicy, Selection};
use praetor::proto::tls_record::{classify, Entry, PLAIN_HTTP_ANSWER, RECORD_HEADER_BYTES};
use praetor::raft::{Message, NodeId};
use praetor::tls::generate::{self, CaOptions, CertKind, CertOptions};
use praetor::tls::stream::{accept, FirstRecord, HandshakeError};
use praetor::tls::{Identity, Protocol, TlsConfigurator};
use rustls::ServerConfig;
use std::cell::RefCell;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

/// Bytes of one input the peer sends: within a socket pair's buffer, so writing never blocks.
const PEER_BYTES_MAX: usize = 64 * 1024;
/// A handshake whose peer has closed ends at once; this bound only turns a hang into a crash.
const HANDSHAKE_BOUND: Duration = Duration::from_secs(2);

struct Fixture {
    // With the timer enabled (handshake timeouts are part of what is fuzzed).
    runtime: monoio::FusionRuntime<
        monoio::time::TimeDriver<monoio::IoUringDriver>,
        monoio::time::TimeDriver<monoio::LegacyDriver>,
    >,
    /// The server port's configuration: client certificates required.
    rpc: Arc<ServerConfig>,
    /// The HTTPS listener's configuration (no client certificate asked for).
    https: Arc<ServerConfig>,
}

fn fixture() -> Fixture {
    let dir = std::env::temp_dir().join(format!("praetor-fuzz-rpc-entry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, ca_key) = generate::generate_ca(&CaOptions::default()).unwrap();
    let (cert, key) = generate::generate_cert(
        &ca,
        &ca_key,
        &CertOptions {
            kind: CertKind::Server,
            datacenter: "dc1".into(),
            domain: "consul".into(),
            node: None,
            additional_dns_names: Vec::new(),
            additional_ip_addresses: Vec::new(),
            days: 30,
            not_before: None,
        },
    )
    .unwrap();
    for (name, text) in [
        ("ca.pem", &ca),
        ("server.pem", &cert),
        ("server-key.pem", &key),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let protocol = |verify_incoming: bool| ProtocolTls {
        ca: CaSource {
            file: Some(dir.join("ca.pem")),
            path: None,
        },
        cert_file: Some(dir.join("server.pem")),
        key_file: Some(dir.join("server-key.pem")),
        verify_incoming,
        ..ProtocolTls::default()
    };
    let config = TlsConfig {
        internal_rpc: protocol(true),
        https: protocol(false),
        ..TlsConfig::default()
    };
    let tls = TlsConfigurator::new(
        &config,
        Identity {
            datacenter: "dc1".into(),
            domain: "consul".into(),
            node_name: "fuzz".into(),
            server: true,
        },
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Fixture {
        runtime: monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap(),
        rpc: tls.server_config(Protocol::InternalRpc).unwrap(),
        https: tls.server_config(Protocol::Https).unwrap(),
    }
}

thread_local! {
    static FIXTURE: RefCell<Fixture> = RefCell::new(fixture());
}

/// The first record's classification agrees with its bytes.
fn check_record_entry(bytes: &[u8]) {
    match classify(bytes) {
        Entry::Incomplete => assert!(bytes.len() < RECORD_HEADER_BYTES),
        Entry::Handshake { length } => {
            assert_eq!((bytes[0], bytes[1]), (22, 3));
            assert_eq!(
                length,
                usize::from(u16::from_be_bytes([bytes[3], bytes[4]]))
            );
        }
        Entry::PlainHttp => assert!(bytes[0].is_ascii_uppercase()),
        Entry::NotTls(why) => assert!(!why.to_string().is_empty()),
    }
}

/// Reads frames as the request loop and the raft thread do, until the bytes run out or a
/// frame is refused.
fn read_frames(bytes: &[u8], raft: bool) {
    let mut buffer = BytesMut::from(bytes);
    while let Ok(Some(frame)) = decode_frame(&mut buffer) {
        if raft {
            if frame.kind != kind::RAFT_MESSAGE {
                return;
            }
            let _ = rmp_serde::from_slice::<(NodeId, Message)>(&frame.payload);
        }
    }
}

/// Runs a TLS accept against a peer that sends `bytes` and closes its sending side.
fn handshake(fixture: &mut Fixture, config: Arc<ServerConfig>, bytes: &[u8], first: FirstRecord) {
    let (mut peer, ours) = UnixStream::pair().unwrap();
    peer.write_all(bytes).unwrap();
    peer.shutdown(std::net::Shutdown::Write).unwrap();
    ours.set_nonblocking(true).unwrap();
    let result = fixture.runtime.block_on(async move {
        let socket = monoio::net::UnixStream::from_std(ours).unwrap();
        accept(config, socket, HANDSHAKE_BOUND, first)
            .await
            .map(|_| ())
    });
    let error = result.expect_err("a forged handshake completed");
    assert!(
        !matches!(error, HandshakeError::TimedOut(_)),
        "a handshake hung on a closed peer"
    );
    assert!(!error.to_string().is_empty());
    // The peer hears Go's answer exactly when it sent a plaintext request to HTTPS.
    peer.set_nonblocking(true).unwrap();
    let mut heard = Vec::new();
    let _ = peer.read_to_end(&mut heard);
    let plain_http = classify(bytes) == Entry::PlainHttp;
    if first == FirstRecord::AnswerPlainHttp && plain_http {
        assert_eq!(heard, PLAIN_HTTP_ANSWER);
    } else {
        assert!(!heard.starts_with(b"HTTP/"), "answered HTTP to {first:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let rest = &rest[..rest.len().min(PEER_BYTES_MAX)];
    check_record_entry(rest);
    let policy = ListenerPolicy {
        verify_incoming: mode & 1 != 0,
        tls_available: mode & 2 != 0,
        allow_insecure_tls: mode & 6 == 6,
    };
    FIXTURE.with_borrow_mut(|fixture| {
        if mode & 8 != 0 {
            let https = fixture.https.clone();
            return handshake(fixture, https, rest, FirstRecord::AnswerPlainHttp);
        }
        let Some((&byte, after)) = rest.split_first() else {
            return;
        };
        let outer = select(byte, Layer::Outer, &policy);
        if policy.verify_incoming {
            assert!(outer.is_err() || outer.is_ok_and(|s| s.starts_tls()));
        }
        assert!(!matches!(
            select(byte, Layer::InsideTls, &policy),
            Ok(Selection::StartTls | Selection::StartInsecureTls)
        ));
        match outer {
            Ok(Selection::PraetorFrames) => read_frames(after, false),
            Ok(Selection::Raft) => read_frames(after, true),
            Ok(Selection::ConsulRpc | Selection::Multiplex) => {
                // What follows is fuzzed on its own (`msgpack_rpc`, `yamux`).
            }
            Ok(Selection::StartTls) => {
                assert!(policy.tls_available);
                let rpc = fixture.rpc.clone();
                handshake(fixture, rpc, after, FirstRecord::Close);
                // Inside a session the same byte selects again (the session cannot be forged,
                // so the inner paths are read as if it had been).
                if let Some((&inner, frames)) = after.split_first() {
                    match select(inner, Layer::InsideTls, &policy) {
                        Ok(Selection::PraetorFrames) => read_frames(frames, false),
                        Ok(Selection::Raft) => read_frames(frames, true),
                        Ok(Selection::ConsulRpc | Selection::Multiplex) => {}
                        Ok(other) => panic!("{other:?} inside TLS"),
                        Err(refusal) => assert!(!refusal.to_string().is_empty()),
                    }
                }
            }
            Ok(Selection::StartInsecureTls) => {
                assert!(policy.allow_insecure_tls && policy.tls_available);
                let https = fixture.https.clone();
                handshake(fixture, https, after, FirstRecord::Close);
            }
            Err(refusal) => assert!(!refusal.to_string().is_empty()),
        }
    });
});
