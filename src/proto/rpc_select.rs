//! Which protocol a connection to the server port (:8300) speaks, from its first byte.
//!
//! Consul multiplexes everything on one port and lets the dialer say what follows with one
//! byte (`agent/pool/conn.go`): [`rpc_type`]. praetor speaks Consul's RPC — one msgpack
//! net/rpc codec on the connection (0) or yamux streams each carrying one (4), a snapshot's
//! own stream (5) — Raft (1,
//! Consul's byte, praetor's own framing after it), plain or inside TLS (3), TLS without
//! client verification (7) for auto-encrypt's certificate request, and its own multiplexed
//! request frames on [`rpc_type::PRAETOR_FRAMES`], a byte Consul does not use. After a TLS
//! handshake the dialer sends a second byte, inside TLS, that selects the protocol again
//! ([`Layer::InsideTls`]).
//!
//! Native TLS: a dialer may also open with a TLS ClientHello itself (first byte 0x16, the
//! handshake record's content type, above every type byte — RFC 7983 keeps 0–19 apart).
//! Consul (`agent/consul/rpc.go`, `handleNativeTLS`) then lets the negotiated ALPN protocol
//! say what follows, with no type byte; mesh gateways route these connections by SNI, which
//! is how WAN federation through gateways reaches a server. [`select_alpn`] maps Consul's
//! ALPN names ([`alpn::OFFERED`]) to the same selections as the type bytes. Consul accepts
//! native TLS only when it holds a CA and a certificate, and always demands a verified
//! client certificate there whatever `verify_incoming` says, because the port is reachable
//! through gateways; praetor does the same ([`ListenerPolicy::native_tls_available`]).
//!
//! [`select`] is the one decision, as a pure function of the byte, the layer and the
//! listener's [`ListenerPolicy`]:
//! - with `verify_incoming`, only TLS may start: a plaintext Raft or RPC byte is refused
//!   (Consul: "Non-TLS connection attempted with VerifyIncoming set");
//! - TLS inside TLS is refused, so a dialer cannot nest handshakes forever;
//! - bytes of Consul protocols praetor does not speak, and unknown bytes, are refused with
//!   their name.
//!
//! A [`Selection`] also says whether the peer claims the server role ([`Selection::Raft`]);
//! the listener then checks its certificate (`tls::verify::authorize_server_peer`).

/// Consul's RPC type bytes, and praetor's own.
pub mod rpc_type {
    /// Consul's net/rpc with msgpack (`RPCConsul`).
    pub const CONSUL: u8 = 0;
    /// Raft (`RPCRaft`).
    pub const RAFT: u8 = 1;
    /// The old muxado multiplexer (`RPCMultiplex`), long gone from Consul too.
    pub const MULTIPLEX: u8 = 2;
    /// TLS follows; another type byte comes inside it (`RPCTLS`).
    pub const TLS: u8 = 3;
    /// Consul's yamux multiplexer (`RPCMultiplexV2`): each stream one msgpack net/rpc codec.
    pub const MULTIPLEX_V2: u8 = 4;
    /// A snapshot stream (`RPCSnapshot`).
    pub const SNAPSHOT: u8 = 5;
    /// Gossip over the RPC port (`RPCGossip`).
    pub const GOSSIP: u8 = 6;
    /// TLS without client verification, for auto-encrypt's first certificate
    /// (`RPCTLSInsecure`).
    pub const TLS_INSECURE: u8 = 7;
    /// gRPC over the RPC port (`RPCGRPC`).
    pub const GRPC: u8 = 8;
    /// Raft log forwarding (`RPCRaftForwarding`); `RPCMaxTypeValue` is 9.
    pub const RAFT_FORWARDING: u8 = 9;
    /// praetor's multiplexed request frames (`proto::rpc`), used between praetor agents
    /// until every call is typed. The last value below the TLS record types (20 and up,
    /// which RFC 7983 keeps apart), as far from Consul's next byte as the range allows.
    pub const PRAETOR_FRAMES: u8 = 0x13;
    /// The content type of a TLS handshake record: a ClientHello opens a native TLS
    /// connection, whose ALPN protocol selects what follows.
    pub const NATIVE_TLS: u8 = 0x16;
}

/// Consul's ALPN protocol names for the server port (`agent/pool/conn.go`).
pub mod alpn {
    /// One msgpack net/rpc codec (as type byte 0).
    pub const RPC_SINGLE: &str = "consul/rpc-single";
    /// Raft (as type byte 1).
    pub const RAFT: &str = "consul/raft";
    /// yamux, each stream one codec (as type byte 4).
    pub const RPC_MULTI: &str = "consul/rpc-multi";
    /// A snapshot stream (as type byte 5).
    pub const RPC_SNAPSHOT: &str = "consul/rpc-snapshot";
    /// Gossip over the RPC port (as type byte 6).
    pub const RPC_GOSSIP: &str = "consul/rpc-gossip";
    /// gRPC (as type byte 8).
    pub const RPC_GRPC: &str = "consul/rpc-grpc";
    /// Raft log forwarding (as type byte 9).
    pub const RAFT_FORWARDING: &str = "consul/raft-forwarding";
    /// WAN gossip packets, length-prefixed, from another datacenter through gateways.
    pub const WAN_GOSSIP_PACKET: &str = "consul/wan-gossip/packet";
    /// A WAN gossip stream from another datacenter through gateways.
    pub const WAN_GOSSIP_STREAM: &str = "consul/wan-gossip/stream";

    /// What a native-TLS listener offers, in Consul's order (`RPCNextProtos`). Every name is
    /// offered, also those praetor does not speak, so that a dialer asking for one learns
    /// it by name after the handshake instead of from a bare `no_application_protocol`.
    pub const OFFERED: [&str; 9] = [
        RPC_SINGLE,
        RAFT,
        RPC_MULTI,
        RPC_SNAPSHOT,
        RPC_GOSSIP,
        RPC_GRPC,
        RAFT_FORWARDING,
        WAN_GOSSIP_PACKET,
        WAN_GOSSIP_STREAM,
    ];
}

// praetor's own protocol bytes: Consul's for Raft, one Consul leaves free for its frames.
const _: () = assert!(super::rpc::PROTOCOL_RAFT == rpc_type::RAFT);
const _: () = assert!(super::rpc::PROTOCOL_RPC == rpc_type::PRAETOR_FRAMES);
const _: () = assert!(rpc_type::PRAETOR_FRAMES > rpc_type::RAFT_FORWARDING);
const _: () = assert!(rpc_type::PRAETOR_FRAMES < 20);
const _: () = assert!(rpc_type::NATIVE_TLS == 22);

/// What the listener is configured to accept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerPolicy {
    /// `tls.internal_rpc.verify_incoming`: only TLS with a verified client certificate.
    pub verify_incoming: bool,
    /// A server certificate is configured, so TLS can be served at all.
    pub tls_available: bool,
    /// `auto_encrypt.allow_tls` on a server: TLS without a client certificate, for agents
    /// fetching their first certificate.
    pub allow_insecure_tls: bool,
    /// A CA and a certificate are configured (Consul's `MutualTLSCapable`), so a ClientHello
    /// as the first byte may start native TLS, with a client certificate always required.
    pub native_tls_available: bool,
}

/// Where the byte was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// The connection's first byte, in plain TCP.
    Outer,
    /// The first byte inside an established TLS session.
    InsideTls,
}

/// What to do with the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// A peer's stream of Raft messages: the peer claims the server role.
    Raft,
    /// One msgpack net/rpc codec on the connection: typed calls, one at a time.
    ConsulRpc,
    /// yamux: every stream one msgpack net/rpc codec.
    Multiplex,
    /// A snapshot's own connection: a `SnapshotRequest`, the archive one way or the other,
    /// a `SnapshotResponse` (`shard::snapshot_stream`).
    Snapshot,
    /// praetor's multiplexed request frames (forwarded HTTP, ping).
    PraetorFrames,
    /// Handshake as a TLS server (verifying client certificates as configured), then read
    /// the next byte inside the session.
    StartTls,
    /// Handshake as a TLS server without asking for a client certificate; only auto-encrypt's
    /// certificate request may follow, with no second byte.
    StartInsecureTls,
    /// The first byte opened a TLS ClientHello: hand the connection, that byte included, to
    /// a TLS server that requires a verified client certificate and offers [`alpn::OFFERED`];
    /// then [`select_alpn`] decides on the negotiated protocol.
    NativeTls,
    /// WAN gossip packets from a server of another datacenter, through mesh gateways: each
    /// a big-endian `u32` length and that many bytes (native TLS only, no type byte).
    WanGossipPacket,
    /// One WAN gossip stream (a push/pull exchange) from a server of another datacenter,
    /// through mesh gateways (native TLS only, no type byte).
    WanGossipStream,
}

impl Selection {
    /// Whether the peer claims to be a server, so that its certificate must say so.
    pub fn claims_server_role(self) -> bool {
        matches!(self, Selection::Raft)
    }

    /// Whether a TLS handshake follows (the only selections a verifying listener lets
    /// through in plaintext).
    pub fn starts_tls(self) -> bool {
        matches!(
            self,
            Selection::StartTls | Selection::StartInsecureTls | Selection::NativeTls
        )
    }
}

/// Why a connection was refused; `Display` is the log line's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A plaintext protocol byte while `verify_incoming` is on.
    PlaintextWithVerifyIncoming { byte: u8 },
    /// TLS asked for, but no server certificate is configured.
    TlsNotConfigured,
    /// Insecure TLS asked for, but `auto_encrypt.allow_tls` is off (or this is no server).
    InsecureTlsNotAllowed,
    /// A TLS byte inside TLS.
    TlsInsideTls,
    /// A Consul protocol praetor does not speak.
    NotSpoken { byte: u8, name: &'static str },
    /// A byte no Consul version assigns.
    Unknown { byte: u8 },
    /// A ClientHello, but this server lacks the CA or the certificate native TLS needs.
    NativeTlsNotConfigured,
    /// A native TLS session that negotiated no ALPN protocol.
    NoAlpn,
    /// A Consul ALPN protocol praetor does not speak.
    AlpnNotSpoken { name: &'static str },
    /// An ALPN protocol that is none of Consul's (rustls negotiates only offered ones, so
    /// only a bug reaches this).
    UnknownAlpn,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::PlaintextWithVerifyIncoming { byte } => write!(
                f,
                "non-TLS connection (protocol byte {byte}) attempted with verify_incoming set"
            ),
            Refusal::TlsNotConfigured => {
                write!(
                    f,
                    "TLS requested but this server has no certificate configured"
                )
            }
            Refusal::InsecureTlsNotAllowed => write!(
                f,
                "TLS without client verification requested but auto_encrypt.allow_tls is off"
            ),
            Refusal::TlsInsideTls => {
                write!(
                    f,
                    "TLS connection attempting to establish inner TLS connection"
                )
            }
            Refusal::NotSpoken { byte, name } => {
                write!(f, "protocol byte {byte} ({name}) is not spoken by praetor")
            }
            Refusal::Unknown { byte } => write!(f, "unrecognized protocol byte {byte:#04x}"),
            Refusal::NativeTlsNotConfigured => write!(
                f,
                "native TLS requested but this server has no CA and certificate configured"
            ),
            Refusal::NoAlpn => write!(
                f,
                "native TLS connection negotiated no ALPN protocol; one of Consul's is needed"
            ),
            Refusal::AlpnNotSpoken { name } => {
                write!(f, "ALPN protocol {name} is not spoken by praetor")
            }
            Refusal::UnknownAlpn => write!(f, "discarding RPC for unknown negotiated protocol"),
        }
    }
}

/// Decides what a connection's protocol byte selects.
pub fn select(byte: u8, layer: Layer, policy: &ListenerPolicy) -> Result<Selection, Refusal> {
    let selection = match byte {
        rpc_type::RAFT => Selection::Raft,
        rpc_type::CONSUL => Selection::ConsulRpc,
        rpc_type::MULTIPLEX_V2 => Selection::Multiplex,
        rpc_type::SNAPSHOT => Selection::Snapshot,
        rpc_type::PRAETOR_FRAMES => Selection::PraetorFrames,
        rpc_type::TLS | rpc_type::TLS_INSECURE if layer == Layer::InsideTls => {
            return Err(Refusal::TlsInsideTls)
        }
        rpc_type::TLS if !policy.tls_available => return Err(Refusal::TlsNotConfigured),
        rpc_type::TLS => Selection::StartTls,
        rpc_type::TLS_INSECURE if !(policy.allow_insecure_tls && policy.tls_available) => {
            return Err(Refusal::InsecureTlsNotAllowed)
        }
        rpc_type::TLS_INSECURE => Selection::StartInsecureTls,
        rpc_type::NATIVE_TLS if layer == Layer::InsideTls => return Err(Refusal::TlsInsideTls),
        rpc_type::NATIVE_TLS if !policy.native_tls_available => {
            return Err(Refusal::NativeTlsNotConfigured)
        }
        rpc_type::NATIVE_TLS => Selection::NativeTls,
        rpc_type::MULTIPLEX => return Err(not_spoken(byte, "the old muxado multiplexer")),
        rpc_type::GOSSIP => return Err(not_spoken(byte, "gossip over RPC")),
        rpc_type::GRPC => return Err(not_spoken(byte, "gRPC")),
        rpc_type::RAFT_FORWARDING => return Err(not_spoken(byte, "Raft forwarding")),
        _ => return Err(Refusal::Unknown { byte }),
    };
    let plaintext = layer == Layer::Outer && !selection.starts_tls();
    if plaintext && policy.verify_incoming {
        return Err(Refusal::PlaintextWithVerifyIncoming { byte });
    }
    // Negative space: nothing reaches here that starts TLS inside TLS, and a plaintext
    // protocol never passes a listener that verifies incoming connections.
    debug_assert!(layer == Layer::Outer || !selection.starts_tls());
    debug_assert!(!(plaintext && policy.verify_incoming));
    // WAN gossip through gateways has no type byte: only native TLS's ALPN selects it.
    debug_assert!(!matches!(
        selection,
        Selection::WanGossipPacket | Selection::WanGossipStream
    ));
    Ok(selection)
}

/// Decides what a native TLS session's negotiated ALPN protocol selects, as the type byte of
/// the same protocol would inside TLS.
pub fn select_alpn(negotiated: Option<&[u8]>) -> Result<Selection, Refusal> {
    let Some(negotiated) = negotiated else {
        return Err(Refusal::NoAlpn);
    };
    let Some(name) = alpn::OFFERED
        .into_iter()
        .find(|name| name.as_bytes() == negotiated)
    else {
        return Err(Refusal::UnknownAlpn);
    };
    match name {
        alpn::RPC_SINGLE => Ok(Selection::ConsulRpc),
        alpn::RPC_MULTI => Ok(Selection::Multiplex),
        alpn::RAFT => Ok(Selection::Raft),
        alpn::RPC_SNAPSHOT => Ok(Selection::Snapshot),
        alpn::WAN_GOSSIP_PACKET => Ok(Selection::WanGossipPacket),
        alpn::WAN_GOSSIP_STREAM => Ok(Selection::WanGossipStream),
        _ => Err(Refusal::AlpnNotSpoken { name }),
    }
}

fn not_spoken(byte: u8, name: &'static str) -> Refusal {
    Refusal::NotSpoken { byte, name }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: ListenerPolicy = ListenerPolicy {
        verify_incoming: false,
        tls_available: true,
        allow_insecure_tls: false,
        native_tls_available: false,
    };
    const VERIFYING: ListenerPolicy = ListenerPolicy {
        verify_incoming: true,
        tls_available: true,
        allow_insecure_tls: true,
        native_tls_available: true,
    };

    #[test]
    fn plaintext_and_tls_select_as_consul_does() {
        assert_eq!(select(1, Layer::Outer, &OPEN), Ok(Selection::Raft));
        assert_eq!(select(0, Layer::Outer, &OPEN), Ok(Selection::ConsulRpc));
        assert_eq!(select(4, Layer::Outer, &OPEN), Ok(Selection::Multiplex));
        assert_eq!(
            select(0x13, Layer::Outer, &OPEN),
            Ok(Selection::PraetorFrames)
        );
        assert_eq!(select(3, Layer::Outer, &OPEN), Ok(Selection::StartTls));
        assert_eq!(
            select(7, Layer::Outer, &OPEN),
            Err(Refusal::InsecureTlsNotAllowed)
        );
        assert_eq!(
            select(7, Layer::Outer, &VERIFYING),
            Ok(Selection::StartInsecureTls)
        );
        assert_eq!(select(1, Layer::InsideTls, &VERIFYING), Ok(Selection::Raft));
        assert_eq!(
            select(4, Layer::InsideTls, &VERIFYING),
            Ok(Selection::Multiplex)
        );
        assert_eq!(
            select(0, Layer::InsideTls, &VERIFYING),
            Ok(Selection::ConsulRpc)
        );
        assert!(Selection::Raft.claims_server_role());
        assert!(!Selection::Multiplex.claims_server_role());
        assert!(!Selection::ConsulRpc.claims_server_role());
    }

    #[test]
    fn verify_incoming_refuses_every_plaintext_byte() {
        for byte in 0..=u8::MAX {
            let selected = select(byte, Layer::Outer, &VERIFYING);
            if let Ok(selection) = selected {
                assert!(
                    selection.starts_tls(),
                    "byte {byte} passed a verifying listener as {selection:?}"
                );
            }
        }
        assert_eq!(
            select(1, Layer::Outer, &VERIFYING),
            Err(Refusal::PlaintextWithVerifyIncoming { byte: 1 })
        );
        assert_eq!(
            select(1, Layer::Outer, &VERIFYING).unwrap_err().to_string(),
            "non-TLS connection (protocol byte 1) attempted with verify_incoming set"
        );
    }

    #[test]
    fn tls_never_nests_and_needs_a_certificate() {
        for byte in [3, 7] {
            assert_eq!(
                select(byte, Layer::InsideTls, &VERIFYING),
                Err(Refusal::TlsInsideTls)
            );
        }
        let no_certificate = ListenerPolicy {
            tls_available: false,
            allow_insecure_tls: true,
            ..OPEN
        };
        assert_eq!(
            select(3, Layer::Outer, &no_certificate),
            Err(Refusal::TlsNotConfigured)
        );
        assert_eq!(
            select(7, Layer::Outer, &no_certificate),
            Err(Refusal::InsecureTlsNotAllowed)
        );
    }

    #[test]
    fn other_bytes_are_refused_by_name() {
        assert_eq!(select(5, Layer::Outer, &OPEN), Ok(Selection::Snapshot));
        assert_eq!(
            select(5, Layer::InsideTls, &VERIFYING),
            Ok(Selection::Snapshot)
        );
        assert_eq!(
            select(5, Layer::Outer, &VERIFYING),
            Err(Refusal::PlaintextWithVerifyIncoming { byte: 5 })
        );
        assert_eq!(
            select(8, Layer::InsideTls, &OPEN).unwrap_err().to_string(),
            "protocol byte 8 (gRPC) is not spoken by praetor"
        );
        assert_eq!(
            select(0x47, Layer::Outer, &OPEN).unwrap_err().to_string(),
            "unrecognized protocol byte 0x47"
        );
        let accepted = (0..=u8::MAX)
            .filter(|b| {
                select(*b, Layer::Outer, &VERIFYING).is_ok()
                    || select(*b, Layer::Outer, &OPEN).is_ok()
            })
            .collect::<Vec<u8>>();
        assert_eq!(accepted, vec![0, 1, 3, 4, 5, 7, 0x13, 0x16]);
    }

    #[test]
    fn a_client_hello_starts_native_tls_only_with_a_ca_and_a_certificate() {
        assert_eq!(
            select(0x16, Layer::Outer, &VERIFYING),
            Ok(Selection::NativeTls)
        );
        assert!(Selection::NativeTls.starts_tls());
        assert_eq!(
            select(0x16, Layer::Outer, &OPEN),
            Err(Refusal::NativeTlsNotConfigured)
        );
        assert_eq!(
            select(0x16, Layer::InsideTls, &VERIFYING),
            Err(Refusal::TlsInsideTls)
        );
        // A listener without verify_incoming takes native TLS too (it verifies clients
        // there anyway).
        let mutual = ListenerPolicy {
            native_tls_available: true,
            ..OPEN
        };
        assert_eq!(
            select(0x16, Layer::Outer, &mutual),
            Ok(Selection::NativeTls)
        );
    }

    #[test]
    fn alpn_names_select_as_their_type_bytes_do() {
        let by_name = |name: &str| select_alpn(Some(name.as_bytes()));
        assert_eq!(by_name("consul/rpc-single"), Ok(Selection::ConsulRpc));
        assert_eq!(by_name("consul/rpc-multi"), Ok(Selection::Multiplex));
        assert_eq!(by_name("consul/raft"), Ok(Selection::Raft));
        assert_eq!(by_name("consul/rpc-snapshot"), Ok(Selection::Snapshot));
        assert_eq!(
            by_name("consul/wan-gossip/packet"),
            Ok(Selection::WanGossipPacket)
        );
        assert_eq!(
            by_name("consul/wan-gossip/stream"),
            Ok(Selection::WanGossipStream)
        );
        for name in [
            "consul/rpc-gossip",
            "consul/rpc-grpc",
            "consul/raft-forwarding",
        ] {
            assert_eq!(
                by_name(name).unwrap_err().to_string(),
                format!("ALPN protocol {name} is not spoken by praetor")
            );
        }
        assert_eq!(select_alpn(None), Err(Refusal::NoAlpn));
        assert_eq!(by_name("h2"), Err(Refusal::UnknownAlpn));
        assert_eq!(by_name("consul/rpc-single/"), Err(Refusal::UnknownAlpn));
        // Every offered name is decided, none twice in the list.
        let mut names = alpn::OFFERED.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), alpn::OFFERED.len());
        assert!(alpn::OFFERED
            .iter()
            .all(|name| by_name(name) != Err(Refusal::UnknownAlpn)));
    }
}
