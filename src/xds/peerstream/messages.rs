//! The peer stream's messages, written by hand with prost's derive to the field numbers of
//! Consul's `pbpeerstream` (package `hashicorp.consul.internal.peerstream`), so a praetor
//! server and a Consul server decode each other's bytes. Fields praetor does not use yet
//! (a `RemoteInfo`'s locality, a `Status`'s details) are left out: protobuf skips unknown
//! fields, so a peer that sends them is still understood.
//!
//! Every decode is bounded by the gRPC layer's message size limit
//! ([`super::MESSAGE_BYTES_MAX`]); prost allocates no more than the bytes it was given.

/// The gRPC service's full name.
pub const SERVICE: &str = "hashicorp.consul.internal.peerstream.PeerStreamService";
/// The start of its methods' paths.
pub const SERVICE_PREFIX: &str = "/hashicorp.consul.internal.peerstream.PeerStreamService/";
/// The paths of its two methods.
pub const STREAM_RESOURCES_PATH: &str =
    "/hashicorp.consul.internal.peerstream.PeerStreamService/StreamResources";
pub const EXCHANGE_SECRET_PATH: &str =
    "/hashicorp.consul.internal.peerstream.PeerStreamService/ExchangeSecret";

/// One message either way on `StreamResources`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReplicationMessage {
    #[prost(oneof = "Payload", tags = "1, 2, 3, 4, 5")]
    pub payload: Option<Payload>,
}

/// What a [`ReplicationMessage`] carries.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Payload {
    #[prost(message, tag = "1")]
    Open(Open),
    #[prost(message, tag = "2")]
    Request(ResourceRequest),
    #[prost(message, tag = "3")]
    Response(ResourceResponse),
    #[prost(message, tag = "4")]
    Terminated(Terminated),
    #[prost(message, tag = "5")]
    Heartbeat(Heartbeat),
}

/// The dialer's first message: which peering, and its stream secret.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Open {
    /// The ID the acceptor gave the peering (the token's `PeerID`).
    #[prost(string, tag = "1")]
    pub peer_id: String,
    #[prost(string, tag = "2")]
    pub stream_secret_id: String,
    #[prost(message, optional, tag = "3")]
    pub remote: Option<RemoteInfo>,
}

/// Consul's `pbpeering.RemoteInfo`: the sender's partition and datacenter.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoteInfo {
    #[prost(string, tag = "1")]
    pub partition: String,
    #[prost(string, tag = "2")]
    pub datacenter: String,
}

/// A subscription to a resource type, or the ACK/NACK of a response (Consul's
/// `ReplicationMessage.Request`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceRequest {
    #[prost(string, tag = "1")]
    pub peer_id: String,
    #[prost(string, tag = "2")]
    pub response_nonce: String,
    #[prost(string, tag = "3")]
    pub resource_url: String,
    #[prost(message, optional, tag = "5")]
    pub error: Option<RpcStatus>,
}

/// A resource sent to a subscriber (Consul's `ReplicationMessage.Response`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceResponse {
    #[prost(string, tag = "1")]
    pub nonce: String,
    #[prost(string, tag = "2")]
    pub resource_url: String,
    #[prost(string, tag = "3")]
    pub resource_id: String,
    #[prost(message, optional, tag = "4")]
    pub resource: Option<AnyResource>,
    /// Consul's `Operation`: 0 unspecified, 1 upsert.
    #[prost(int32, tag = "5")]
    pub operation: i32,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyResource {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// Consul's `pbstatus.Status` (a NACK's reason).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// The sender deleted the peering: the receiver cleans up and stops.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Terminated {}

/// Sent every heartbeat interval so the other side knows the stream is alive.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Heartbeat {}

/// `ExchangeSecret`'s request: the token's peer ID and one-time establishment secret.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExchangeSecretRequest {
    #[prost(string, tag = "1")]
    pub peer_id: String,
    #[prost(string, tag = "2")]
    pub establishment_secret: String,
}

/// `ExchangeSecret`'s answer: the long-lived stream secret.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExchangeSecretResponse {
    #[prost(string, tag = "1")]
    pub stream_secret: String,
}

impl ReplicationMessage {
    pub fn of(payload: Payload) -> ReplicationMessage {
        ReplicationMessage {
            payload: Some(payload),
        }
    }
    pub fn heartbeat() -> ReplicationMessage {
        ReplicationMessage::of(Payload::Heartbeat(Heartbeat {}))
    }
    pub fn terminated() -> ReplicationMessage {
        ReplicationMessage::of(Payload::Terminated(Terminated {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn open_has_consuls_field_numbers() {
        let message = ReplicationMessage::of(Payload::Open(Open {
            peer_id: "p".into(),
            stream_secret_id: "s".into(),
            remote: Some(RemoteInfo {
                partition: "default".into(),
                datacenter: "dc2".into(),
            }),
        }));
        let bytes = message.encode_to_vec();
        // Field 1 (open), length-delimited; inside: 1 "p", 2 "s", 3 { 1 "default", 2 "dc2" }.
        let expected = [
            0x0a, 22, 0x0a, 1, b'p', 0x12, 1, b's', 0x1a, 14, 0x0a, 7, b'd', b'e', b'f', b'a',
            b'u', b'l', b't', 0x12, 3, b'd', b'c', b'2',
        ];
        assert_eq!(bytes, expected);
        assert_eq!(ReplicationMessage::decode(&bytes[..]).unwrap(), message);
    }

    #[test]
    fn heartbeat_and_terminated_are_empty_messages_in_fields_5_and_4() {
        assert_eq!(ReplicationMessage::heartbeat().encode_to_vec(), [0x2a, 0]);
        assert_eq!(ReplicationMessage::terminated().encode_to_vec(), [0x22, 0]);
    }

    #[test]
    fn unknown_fields_are_skipped_and_truncated_input_is_an_error() {
        // An Open with an extra field 9 (varint 1) the sender knows and praetor does not.
        let bytes = [0x0a, 5, 0x0a, 1, b'p', 0x48, 1];
        let decoded = ReplicationMessage::decode(&bytes[..]).unwrap();
        assert!(matches!(decoded.payload, Some(Payload::Open(ref o)) if o.peer_id == "p"));
        assert!(ReplicationMessage::decode(&[0x0a, 9, 0x0a][..]).is_err());
    }
}
