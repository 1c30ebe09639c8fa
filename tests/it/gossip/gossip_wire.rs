//! Byte-exact vectors for every gossip message, derived by hand from memberlist 0.2.2 /
//! serf 0.9.4 sources and go-msgpack 0.5.5's `MsgpackHandle{}` rules (struct fields as a
//! map keyed by Go field name in sorted order; strings and []byte as fixstr/str16; nil
//! slices as 0xc0; shortest integer forms), plus round trips and hostile-input checks.

use std::collections::BTreeMap;

use praetor::proto::gossip::memberlist::{
    self as ml, AckResp, Alive, ErrResp, IndirectPingReq, Message, NackResp, NodeStateKind,
    PacketSeal, Ping, PushNodeState, StreamMessage, StreamSeal, Suspect, Unseal,
};
use praetor::proto::gossip::serf::{
    self as sm, Coordinate, JoinIntent, KeyRequest, KeyResponse, LeaveIntent, QueryMsg,
    QueryResponseMsg, SerfMessage, SerfPushPull, UserEventItem, UserEventMsg, UserEventsAt,
};
use praetor::proto::gossip::{lzw, security};

/// msgpack fixstr.
fn s(x: &str) -> Vec<u8> {
    assert!(x.len() < 32);
    let mut v = vec![0xa0 | x.len() as u8];
    v.extend_from_slice(x.as_bytes());
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn plain() -> Unseal<'static> {
    Unseal {
        keys: &[],
        verify_incoming: true,
        label: "",
        skip_inbound_label_check: false,
    }
}

fn roundtrip(m: Message) {
    let bytes = m.encode();
    let c = ml::open_packet(&bytes, &plain()).unwrap();
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    assert_eq!(c.messages, vec![m]);
}

#[test]
fn ping_without_source_fields() {
    let m = Message::Ping(Ping {
        seq_no: 1,
        node: "n1".into(),
        ..Default::default()
    });
    let want = cat(&[&[0x00, 0x82], &s("Node"), &s("n1"), &s("SeqNo"), &[0x01]]);
    assert_eq!(m.encode(), want);
    roundtrip(m);
}

#[test]
fn ping_with_source_fields_sorted() {
    let m = Message::Ping(Ping {
        seq_no: 300,
        node: "b".into(),
        source_addr: vec![127, 0, 0, 1],
        source_port: 7946,
        source_node: "a".into(),
    });
    let want = cat(&[
        &[0x00, 0x85],
        &s("Node"),
        &s("b"),
        &s("SeqNo"),
        &[0xcd, 0x01, 0x2c],
        &s("SourceAddr"),
        &[0xa4, 127, 0, 0, 1],
        &s("SourceNode"),
        &s("a"),
        &s("SourcePort"),
        &[0xcd, 0x1f, 0x0a],
    ]);
    assert_eq!(m.encode(), want);
    roundtrip(m);
}

#[test]
fn indirect_ping() {
    let m = Message::IndirectPing(IndirectPingReq {
        seq_no: 2,
        target: vec![10, 0, 0, 9],
        port: 7946,
        node: "t".into(),
        nack: true,
        source_addr: vec![],
        source_port: 0,
        source_node: String::new(),
    });
    let want = cat(&[
        &[0x01, 0x85],
        &s("Nack"),
        &[0xc3],
        &s("Node"),
        &s("t"),
        &s("Port"),
        &[0xcd, 0x1f, 0x0a],
        &s("SeqNo"),
        &[0x02],
        &s("Target"),
        &[0xa4, 10, 0, 0, 9],
    ]);
    assert_eq!(m.encode(), want);
    roundtrip(m);
}

#[test]
fn ack_nack_err() {
    let ack = Message::Ack(AckResp {
        seq_no: 5,
        payload: None,
    });
    assert_eq!(
        ack.encode(),
        cat(&[&[0x02, 0x82], &s("Payload"), &[0xc0], &s("SeqNo"), &[0x05]])
    );
    roundtrip(ack);
    let ack = Message::Ack(AckResp {
        seq_no: 5,
        payload: Some(vec![1, 2]),
    });
    assert_eq!(
        ack.encode(),
        cat(&[
            &[0x02, 0x82],
            &s("Payload"),
            &[0xa2, 1, 2],
            &s("SeqNo"),
            &[0x05]
        ])
    );
    roundtrip(ack);
    let nack = Message::Nack(NackResp { seq_no: 5 });
    assert_eq!(nack.encode(), cat(&[&[0x0b, 0x81], &s("SeqNo"), &[0x05]]));
    roundtrip(nack);
    assert_eq!(
        ml::encode_err("boom"),
        cat(&[&[0x0d, 0x81], &s("Error"), &s("boom")])
    );
    let _ = ErrResp::default();
}

#[test]
fn suspect_alive_dead() {
    let sus = Message::Suspect(Suspect {
        incarnation: 3,
        node: "x".into(),
        from: "y".into(),
    });
    let body = cat(&[
        &[0x83],
        &s("From"),
        &s("y"),
        &s("Incarnation"),
        &[0x03],
        &s("Node"),
        &s("x"),
    ]);
    assert_eq!(sus.encode(), cat(&[&[0x03], &body]));
    roundtrip(sus);
    let dead = Message::Dead(Suspect {
        incarnation: 3,
        node: "x".into(),
        from: "y".into(),
    });
    assert_eq!(dead.encode(), cat(&[&[0x05], &body]));
    roundtrip(dead);
    let alive = Message::Alive(Alive {
        incarnation: 1,
        node: "x".into(),
        addr: vec![127, 0, 0, 1],
        port: 7946,
        meta: None,
        vsn: vec![1, 5, 2, 2, 5, 4],
    });
    let want = cat(&[
        &[0x04, 0x86],
        &s("Addr"),
        &[0xa4, 127, 0, 0, 1],
        &s("Incarnation"),
        &[0x01],
        &s("Meta"),
        &[0xc0],
        &s("Node"),
        &s("x"),
        &s("Port"),
        &[0xcd, 0x1f, 0x0a],
        &s("Vsn"),
        &[0xa6, 1, 5, 2, 2, 5, 4],
    ]);
    assert_eq!(alive.encode(), want);
    roundtrip(alive);
}

#[test]
fn user_message_is_type_8_plus_raw_payload() {
    let m = Message::User(vec![1, 2, 3]);
    assert_eq!(m.encode(), vec![0x08, 1, 2, 3]);
    roundtrip(m);
}

#[test]
fn compound_crc_label_and_compression() {
    let a = Message::Nack(NackResp { seq_no: 1 }).encode();
    let b = Message::Nack(NackResp { seq_no: 2 }).encode();
    let c = ml::make_compound(&[&a, &b]);
    assert_eq!(
        &c[..6],
        &[0x07, 0x02, 0x00, a.len() as u8, 0x00, b.len() as u8]
    );
    let got = ml::open_packet(&c, &plain()).unwrap();
    assert_eq!(got.messages.len(), 2);
    // A truncated last part is reported, the first still delivered (memberlist).
    let got = ml::open_packet(&c[..c.len() - 1], &plain()).unwrap();
    assert_eq!((got.messages.len(), got.errors.len()), (1, 1));

    // CRC32 (IEEE) of "abc" is 0x352441c2.
    assert_eq!(
        ml::add_crc(b"abc"),
        vec![0x0c, 0x35, 0x24, 0x41, 0xc2, b'a', b'b', b'c']
    );
    let mut with_crc = ml::add_crc(&a);
    assert_eq!(
        ml::open_packet(&with_crc, &plain()).unwrap().messages.len(),
        1
    );
    let last = with_crc.len() - 1;
    with_crc[last] ^= 1;
    assert!(ml::open_packet(&with_crc, &plain()).is_err());

    // Label header 244, length, label.
    assert_eq!(ml::label_header("dc1"), vec![244, 3, b'd', b'c', b'1']);
    let labeled = cat(&[&ml::label_header("dc1"), &a]);
    let want_label = Unseal {
        keys: &[],
        verify_incoming: true,
        label: "dc1",
        skip_inbound_label_check: false,
    };
    assert_eq!(
        ml::open_packet(&labeled, &want_label)
            .unwrap()
            .messages
            .len(),
        1
    );
    assert!(
        ml::open_packet(&labeled, &plain()).is_err(),
        "label mismatch must be refused"
    );
    assert!(
        ml::open_packet(&a, &want_label).is_err(),
        "missing label must be refused"
    );
    assert!(ml::open_packet(&[244, 0], &want_label).is_err());

    // compress{Algo: 0, Buf: lzw}: type 9, map with sorted Algo, Buf.
    let big = Message::User(vec![b'z'; 400]).encode();
    let packed = ml::compress_payload(&big);
    assert_eq!(&packed[..1], &[0x09]);
    assert_eq!(&packed[1..7], &cat(&[&[0x82], &s("Algo")])[..]);
    assert_eq!(packed[7], 0x00);
    assert_eq!(&packed[8..12], &s("Buf")[..]);
    let got = ml::open_packet(&packed, &plain()).unwrap();
    assert_eq!(got.messages, vec![Message::User(vec![b'z'; 400])]);
}

#[test]
fn sealed_packets_open_with_the_keyring_and_label_as_aad() {
    let key = vec![5u8; 16];
    let keys = vec![vec![1u8; 32], key.clone()];
    let msg = Message::Ping(Ping {
        seq_no: 9,
        node: "n".into(),
        ..Default::default()
    })
    .encode();
    let seal = PacketSeal {
        compress: true,
        crc: true,
        key: Some(&key),
        encryption_version: 1,
        label: "lab",
    };
    let sealed = ml::seal_packet(msg.clone(), &seal, [7; 12]);
    assert_eq!(&sealed[..5], &[244, 3, b'l', b'a', b'b']);
    assert_eq!(sealed[5], 1, "encryption version byte");
    assert_eq!(&sealed[6..18], &[7; 12], "nonce");
    let open = Unseal {
        keys: &keys,
        verify_incoming: true,
        label: "lab",
        skip_inbound_label_check: false,
    };
    let got = ml::open_packet(&sealed, &open).unwrap();
    assert_eq!(got.messages.len(), 1);
    // The label is authenticated: strip it and claim another one.
    let mut relabeled = ml::label_header("bad");
    relabeled.extend_from_slice(&sealed[5..]);
    let open_bad = Unseal {
        keys: &keys,
        verify_incoming: true,
        label: "bad",
        skip_inbound_label_check: false,
    };
    assert!(ml::open_packet(&relabeled, &open_bad).is_err());
    // Plaintext is refused when verifying incoming, accepted when not.
    assert!(ml::open_packet(
        &msg,
        &Unseal {
            keys: &keys,
            verify_incoming: true,
            label: "",
            skip_inbound_label_check: false
        }
    )
    .is_err());
    assert!(ml::open_packet(
        &msg,
        &Unseal {
            keys: &keys,
            verify_incoming: false,
            label: "",
            skip_inbound_label_check: false
        }
    )
    .is_ok());
}

#[test]
fn aes_gcm_known_answer() {
    // NIST GCM spec test case 2: K = 0^128, IV = 0^96, P = 0^128.
    let mut out = Vec::new();
    security::encrypt_payload(1, &[0; 16], &[0; 16], &[], [0; 12], &mut out);
    let want_ct = [
        0x03, 0x88, 0xda, 0xce, 0x60, 0xb6, 0xa3, 0x92, 0xf3, 0x28, 0xc2, 0xb9, 0x71, 0xb2, 0xfe,
        0x78,
    ];
    let want_tag = [
        0xab, 0x6e, 0x47, 0xd4, 0x2c, 0xec, 0x13, 0xbd, 0xf5, 0x3a, 0x67, 0xb2, 0x12, 0x57, 0xbd,
        0xdf,
    ];
    assert_eq!(out[0], 1);
    assert_eq!(&out[1..13], &[0; 12]);
    assert_eq!(&out[13..29], &want_ct);
    assert_eq!(&out[29..45], &want_tag);
    // Version 0 pads with PKCS#7: 16 bytes of plaintext become 32 (a full pad block).
    let mut v0 = Vec::new();
    security::encrypt_payload(0, &[0; 16], &[0; 16], &[], [0; 12], &mut v0);
    assert_eq!(v0.len(), 1 + 12 + 32 + 16);
    assert_eq!(&v0[13..29], &want_ct, "same keystream for the first block");
    assert_eq!(
        security::decrypt_payload(&[vec![0; 16]], &v0, &[]).unwrap(),
        vec![0; 16]
    );
}

fn node_state(name: &str) -> PushNodeState {
    PushNodeState {
        name: name.into(),
        addr: vec![127, 0, 0, 1],
        port: 7946,
        meta: Some(vec![0xff, 0x80]),
        incarnation: 2,
        state: NodeStateKind::Suspect,
        vsn: vec![1, 5, 2, 2, 5, 4],
    }
}

#[test]
fn push_pull_stream_bytes_and_framing() {
    let user = b"serf-state".to_vec();
    let bytes = ml::encode_push_pull(true, &[node_state("a")], &user);
    let header = cat(&[
        &[0x06, 0x83],
        &s("Join"),
        &[0xc3],
        &s("Nodes"),
        &[0x01],
        &s("UserStateLen"),
        &[0x0a],
    ]);
    assert_eq!(&bytes[..header.len()], &header[..]);
    let node = cat(&[
        &[0x87],
        &s("Addr"),
        &[0xa4, 127, 0, 0, 1],
        &s("Incarnation"),
        &[0x02],
        &s("Meta"),
        &[0xa2, 0xff, 0x80],
        &s("Name"),
        &s("a"),
        &s("Port"),
        &[0xcd, 0x1f, 0x0a],
        &s("State"),
        &[0x01],
        &s("Vsn"),
        &[0xa6, 1, 5, 2, 2, 5, 4],
    ]);
    assert_eq!(&bytes[header.len()..header.len() + node.len()], &node[..]);
    assert_eq!(&bytes[header.len() + node.len()..], &user[..]);

    // Framing: incomplete prefixes ask for more, the full message is measured exactly.
    for cut in 0..bytes.len() {
        assert_eq!(
            ml::stream_frame_len(&bytes[..cut], true).unwrap(),
            None,
            "cut {cut}"
        );
    }
    let mut more = bytes.clone();
    more.extend_from_slice(b"trailing");
    assert_eq!(
        ml::stream_frame_len(&more, true).unwrap(),
        Some(bytes.len())
    );

    // Sealed (compressed, encrypted, labeled) and opened again.
    let key = [3u8; 24];
    for (compress, k, label) in [
        (false, None, ""),
        (true, None, ""),
        (true, Some(&key[..]), "lab"),
        (false, Some(&key[..]), ""),
    ] {
        let seal = StreamSeal {
            compress,
            key: k,
            encryption_version: 1,
            label,
            write_label_header: true,
        };
        let sealed = ml::seal_stream(bytes.clone(), &seal, [1; 12]);
        if k.is_some() {
            let at = if label.is_empty() { 0 } else { 2 + label.len() };
            assert_eq!(sealed[at], 10, "encryptMsg");
        }
        assert_eq!(
            ml::stream_frame_len(&sealed, true).unwrap(),
            Some(sealed.len())
        );
        let keys: Vec<Vec<u8>> = k.map(|k| vec![k.to_vec()]).unwrap_or_default();
        let unseal = Unseal {
            keys: &keys,
            verify_incoming: true,
            label,
            skip_inbound_label_check: false,
        };
        match ml::open_stream(&sealed, &unseal, true).unwrap() {
            StreamMessage::PushPull {
                join,
                nodes,
                user_state,
            } => {
                assert!(join);
                assert_eq!(nodes, vec![node_state("a")]);
                assert_eq!(user_state, user);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn stream_user_message_and_ping() {
    let u = ml::encode_stream_user(b"hi");
    assert_eq!(u, cat(&[&[0x08, 0x81], &s("UserMsgLen"), &[0x02], b"hi"]));
    assert_eq!(
        ml::open_stream(&u, &plain(), true).unwrap(),
        StreamMessage::User(b"hi".to_vec())
    );
    let p = Message::Ping(Ping {
        seq_no: 4,
        node: "n".into(),
        ..Default::default()
    })
    .encode();
    assert_eq!(ml::stream_frame_len(&p, true).unwrap(), Some(p.len()));
    assert!(matches!(
        ml::open_stream(&p, &plain(), true).unwrap(),
        StreamMessage::Ping(_)
    ));
}

#[test]
fn serf_intents_and_events() {
    let join = SerfMessage::Join(JoinIntent {
        ltime: 5,
        node: "a".into(),
    });
    assert_eq!(
        join.encode(),
        cat(&[&[0x01, 0x82], &s("LTime"), &[0x05], &s("Node"), &s("a")])
    );
    let leave = SerfMessage::Leave(LeaveIntent {
        ltime: 5,
        node: "a".into(),
        prune: false,
    });
    assert_eq!(
        leave.encode(),
        cat(&[
            &[0x00, 0x83],
            &s("LTime"),
            &[0x05],
            &s("Node"),
            &s("a"),
            &s("Prune"),
            &[0xc2]
        ])
    );
    let ev = SerfMessage::UserEvent(UserEventMsg {
        ltime: 2,
        name: "deploy".into(),
        payload: b"v1".to_vec(),
        cc: false,
    });
    assert_eq!(
        ev.encode(),
        cat(&[
            &[0x03, 0x84],
            &s("CC"),
            &[0xc2],
            &s("LTime"),
            &[0x02],
            &s("Name"),
            &s("deploy"),
            &s("Payload"),
            &s("v1")
        ])
    );
    for m in [join, leave, ev] {
        assert_eq!(SerfMessage::decode(&m.encode()).unwrap(), m);
    }
}

#[test]
fn serf_query_response_and_key_messages() {
    let q = QueryMsg {
        ltime: 3,
        id: 77,
        addr: vec![127, 0, 0, 1],
        port: 7946,
        source_node: "a".into(),
        filters: vec![],
        flags: 0,
        relay_factor: 0,
        timeout_ns: 5_000_000_000,
        name: "_serf_list-keys".into(),
        payload: KeyRequest { key: vec![] }.encode(),
    };
    let bytes = SerfMessage::Query(q.clone()).encode();
    let want = cat(&[
        &[0x04, 0x8b],
        &s("Addr"),
        &[0xa4, 127, 0, 0, 1],
        &s("Filters"),
        &[0xc0],
        &s("Flags"),
        &[0x00],
        &s("ID"),
        &[0x4d],
        &s("LTime"),
        &[0x03],
        &s("Name"),
        &s("_serf_list-keys"),
        &s("Payload"),
        &[0xa7, 0x07, 0x81, 0xa3, b'K', b'e', b'y', 0xa0],
        &s("Port"),
        &[0xcd, 0x1f, 0x0a],
        &s("RelayFactor"),
        &[0x00],
        &s("SourceNode"),
        &s("a"),
        &s("Timeout"),
        &[0xcf, 0, 0, 0, 0x01, 0x2a, 0x05, 0xf2, 0x00],
    ]);
    // 5e9 ns does not fit in 32 bits: uint64 form.
    assert_eq!(bytes, want);
    assert_eq!(SerfMessage::decode(&bytes).unwrap(), SerfMessage::Query(q));

    let kr = KeyResponse {
        result: true,
        message: String::new(),
        keys: vec!["k1".into()],
        primary_key: "k1".into(),
    };
    let enc = kr.encode();
    assert_eq!(
        enc,
        cat(&[
            &[0x08, 0x84],
            &s("Keys"),
            &[0x91],
            &s("k1"),
            &s("Message"),
            &[0xa0],
            &s("PrimaryKey"),
            &s("k1"),
            &s("Result"),
            &[0xc3]
        ])
    );
    assert_eq!(KeyResponse::decode(&enc).unwrap(), kr);
    let resp = QueryResponseMsg {
        ltime: 3,
        id: 77,
        from: "b".into(),
        flags: 0,
        payload: enc,
    };
    let bytes = SerfMessage::QueryResponse(resp.clone()).encode();
    assert_eq!(&bytes[..2], &[0x05, 0x85]);
    assert_eq!(
        SerfMessage::decode(&bytes).unwrap(),
        SerfMessage::QueryResponse(resp)
    );

    let relay = SerfMessage::Relay {
        dest_ip: vec![127, 0, 0, 1],
        dest_port: 7946,
        dest_name: "a".into(),
        inner: vec![0x05, 0x80],
    };
    let bytes = relay.encode();
    assert_eq!(
        &bytes[..],
        &cat(&[
            &[0x09, 0x82],
            &s("DestAddr"),
            &[0x83],
            &s("IP"),
            &[0xa4, 127, 0, 0, 1],
            &s("Port"),
            &[0xcd, 0x1f, 0x0a],
            &s("Zone"),
            &[0xa0],
            &s("DestName"),
            &s("a"),
            &[0x05, 0x80],
        ])[..]
    );
    assert_eq!(SerfMessage::decode(&bytes).unwrap(), relay);
}

#[test]
fn serf_push_pull_state() {
    let pp = SerfPushPull {
        ltime: 9,
        status_ltimes: vec![("a".into(), 4)],
        left_members: vec![],
        event_ltime: 3,
        events: vec![
            None,
            Some(UserEventsAt {
                ltime: 1,
                events: vec![UserEventItem {
                    name: "e".into(),
                    payload: vec![],
                }],
            }),
        ],
        query_ltime: 2,
    };
    let bytes = pp.encode();
    let want = cat(&[
        &[0x02, 0x86],
        &s("EventLTime"),
        &[0x03],
        &s("Events"),
        &[0x92, 0xc0, 0x82],
        &s("Events"),
        &[0x91, 0x82],
        &s("Name"),
        &s("e"),
        &s("Payload"),
        &[0xc0],
        &s("LTime"),
        &[0x01],
        &s("LTime"),
        &[0x09],
        &s("LeftMembers"),
        &[0x90],
        &s("QueryLTime"),
        &[0x02],
        &s("StatusLTimes"),
        &[0x81],
        &s("a"),
        &[0x04],
    ]);
    assert_eq!(bytes, want);
    assert_eq!(SerfPushPull::decode(&bytes).unwrap(), pp);
}

#[test]
fn tags_and_coordinates() {
    let mut tags = BTreeMap::new();
    tags.insert("role".to_owned(), "node".to_owned());
    let t = sm::encode_tags(&tags);
    assert_eq!(t, cat(&[&[0xff, 0x81], &s("role"), &s("node")]));
    assert_eq!(sm::decode_tags(&t).unwrap(), tags);
    // Protocol < 3 meta is a bare role.
    assert_eq!(
        sm::decode_tags(b"web")
            .unwrap()
            .get("role")
            .map(String::as_str),
        Some("web")
    );

    let c = Coordinate {
        vec: vec![0.0; 8],
        error: 1.5,
        adjustment: 0.0,
        height: 1.0e-5,
    };
    let p = c.encode_ack_payload();
    let mut want = cat(&[
        &[0x01, 0x84],
        &s("Adjustment"),
        &[0xcb, 0, 0, 0, 0, 0, 0, 0, 0],
        &s("Error"),
    ]);
    want.push(0xcb);
    want.extend_from_slice(&1.5f64.to_bits().to_be_bytes());
    want.extend_from_slice(&s("Height"));
    want.push(0xcb);
    want.extend_from_slice(&1.0e-5f64.to_bits().to_be_bytes());
    want.extend_from_slice(&s("Vec"));
    want.push(0x98);
    for _ in 0..8 {
        want.extend_from_slice(&[0xcb, 0, 0, 0, 0, 0, 0, 0, 0]);
    }
    assert_eq!(p, want);
    assert_eq!(Coordinate::decode_ack_payload(&p).unwrap(), c);
}

#[test]
fn hostile_inputs_are_errors_not_panics() {
    let open = plain();
    let samples: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x07],
        vec![0x07, 0xff],
        vec![0x09, 0x82],
        vec![0x04, 0xdf, 0xff, 0xff, 0xff, 0xff],
        vec![
            0x00, 0x81, 0xa4, b'N', b'o', b'd', b'e', 0xdb, 0xff, 0xff, 0xff, 0xff,
        ],
        vec![0xc1; 10],
        vec![244, 200, 1],
    ];
    for s in samples {
        let _ = ml::open_packet(&s, &open);
        let _ = ml::open_stream(&s, &open, true);
        let _ = ml::stream_frame_len(&s, true);
        let _ = SerfMessage::decode(&s);
        let _ = SerfPushPull::decode(&s);
        let _ = lzw::decompress(&s, 1 << 20);
    }
    // A push/pull header claiming a million nodes with no bytes behind it.
    let mut w = vec![0x06];
    w.extend_from_slice(&cat(&[
        &[0x83],
        &s("Join"),
        &[0xc2],
        &s("Nodes"),
        &[0xce, 0x00, 0x0f, 0x42, 0x40],
        &s("UserStateLen"),
        &[0x00],
    ]));
    assert!(ml::open_stream(&w, &open, true).is_err());
    // A stream longer than the limit without completing is refused by framing.
    let huge = cat(&[
        &[0x08, 0x81],
        &s("UserMsgLen"),
        &[0xce, 0x7f, 0xff, 0xff, 0xff],
    ]);
    assert!(ml::stream_frame_len(&huge, true).is_err());
}
