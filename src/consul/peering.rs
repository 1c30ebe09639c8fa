//! Consul's cluster-peering shapes: the peering token (base64 of a JSON document, as
//! Consul's `PeeringBackend.EncodeToken` makes it), its decoding and validation with
//! Consul's errors, peer-name checks, and a peering rendered as `api.Peering`.
//!
//! Pure: the caller supplies IDs, secrets and times. A token is untrusted input from
//! another cluster: its size is bounded before it is decoded ([`TOKEN_BYTES_MAX`]) and every
//! failure is a [`TokenError`], never a panic (`fuzz/` decodes arbitrary bytes with it).

use crate::store::peering::{Peering, PeeringState, PEER_LIST_ENTRIES_MAX, PEER_NAME_BYTES_MAX};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Largest peering token accepted, in bytes of base64: a token carries a few CA
/// certificates and addresses, far below this.
pub const TOKEN_BYTES_MAX: usize = 256 * 1024;

/// Consul's `structs.PeeringToken`, in its JSON field order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PeeringToken {
    #[serde(rename = "CA")]
    pub ca: Option<Vec<String>>,
    #[serde(rename = "ManualServerAddresses")]
    pub manual_server_addresses: Option<Vec<String>>,
    #[serde(rename = "ServerAddresses")]
    pub server_addresses: Option<Vec<String>>,
    #[serde(rename = "ServerName")]
    pub server_name: String,
    #[serde(rename = "PeerID")]
    pub peer_id: String,
    #[serde(rename = "EstablishmentSecret")]
    pub establishment_secret: String,
    #[serde(rename = "Remote")]
    pub remote: TokenRemote,
}

/// Consul's `structs.PeeringTokenRemote`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenRemote {
    #[serde(rename = "Partition")]
    pub partition: String,
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    /// Always `null` here (Consul's `*Locality`, enterprise only).
    #[serde(rename = "Locality")]
    pub locality: Option<serde_json::Value>,
}

impl PeeringToken {
    pub fn ca(&self) -> &[String] {
        self.ca.as_deref().unwrap_or_default()
    }
    pub fn server_addresses(&self) -> &[String] {
        self.server_addresses.as_deref().unwrap_or_default()
    }
    pub fn manual_server_addresses(&self) -> &[String] {
        self.manual_server_addresses.as_deref().unwrap_or_default()
    }
}

/// Why a peering token was refused, in Consul's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenError {
    TooLarge,
    Base64(String),
    Json(String),
    InvalidCa,
    EmptyServerAddresses,
    InvalidServerAddress(String),
    EmptyServerName,
    EmptyPeerId,
    TooManyEntries,
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::TooLarge => write!(
                f,
                "failed to decode token: longer than {TOKEN_BYTES_MAX} bytes"
            ),
            TokenError::Base64(e) => write!(f, "failed to decode token: {e}"),
            TokenError::Json(e) => write!(f, "{e}"),
            TokenError::InvalidCa => write!(f, "peering token CA value is invalid"),
            TokenError::EmptyServerAddresses => {
                write!(f, "peering token server addresses value is empty")
            }
            TokenError::InvalidServerAddress(addr) => {
                write!(f, "{addr} is not a valid peering server address")
            }
            TokenError::EmptyServerName => write!(f, "peering token server name value is empty"),
            TokenError::EmptyPeerId => write!(f, "peering token peer ID value is empty"),
            TokenError::TooManyEntries => write!(
                f,
                "peering token lists more than {PEER_LIST_ENTRIES_MAX} addresses or certificates"
            ),
        }
    }
}

/// The token's text: base64 (standard alphabet, padded) of its JSON.
pub fn encode_token(token: &PeeringToken) -> String {
    let json = serde_json::to_vec(token).expect("a token always encodes");
    base64::engine::general_purpose::STANDARD.encode(json)
}

/// Decodes a token's text (Consul's `DecodeToken`), without validating it.
pub fn decode_token(text: &str) -> Result<PeeringToken, TokenError> {
    if text.len() > TOKEN_BYTES_MAX {
        return Err(TokenError::TooLarge);
    }
    let json = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| TokenError::Base64(go_base64_error(text, &e)))?;
    serde_json::from_slice(&json).map_err(|e| TokenError::Json(go_json_error(&e)))
}

/// Go's `base64.CorruptInputError` text for the same input.
fn go_base64_error(text: &str, error: &base64::DecodeError) -> String {
    let at = match error {
        base64::DecodeError::InvalidByte(at, _) => *at,
        base64::DecodeError::InvalidLastSymbol { offset, .. } => *offset,
        // Go reports a short final quantum at the offset of its first byte.
        base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => {
            text.len() - text.len() % 4
        }
    };
    format!("illegal base64 data at input byte {at}")
}

/// A JSON error worded as Go's decoder words the common ones.
fn go_json_error(error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match error.classify() {
        Category::Eof => "unexpected end of JSON input".to_string(),
        Category::Syntax => format!("invalid character in JSON input: {error}"),
        Category::Data => format!("json: cannot unmarshal token: {error}"),
        Category::Io => error.to_string(),
    }
}

/// Consul's `validatePeeringToken`.
pub fn validate_token(token: &PeeringToken) -> Result<(), TokenError> {
    let lists = [
        token.ca(),
        token.server_addresses(),
        token.manual_server_addresses(),
    ];
    if lists.iter().any(|l| l.len() > PEER_LIST_ENTRIES_MAX) {
        return Err(TokenError::TooManyEntries);
    }
    if token.ca().iter().any(|pem| !looks_like_certificate(pem)) {
        return Err(TokenError::InvalidCa);
    }
    if token.server_addresses().is_empty() && token.manual_server_addresses().is_empty() {
        return Err(TokenError::EmptyServerAddresses);
    }
    for addr in token
        .server_addresses()
        .iter()
        .chain(token.manual_server_addresses())
    {
        if !valid_server_address(addr) {
            return Err(TokenError::InvalidServerAddress(addr.clone()));
        }
    }
    if !token.ca().is_empty() && token.server_name.is_empty() {
        return Err(TokenError::EmptyServerName);
    }
    if token.peer_id.is_empty() {
        return Err(TokenError::EmptyPeerId);
    }
    Ok(())
}

/// A PEM block of a certificate whose body is base64 (the X.509 parse is the TLS layer's,
/// once the stream dials with it).
fn looks_like_certificate(pem: &str) -> bool {
    let pem = pem.trim();
    let Some(body) = pem
        .strip_prefix("-----BEGIN CERTIFICATE-----")
        .and_then(|rest| rest.split("-----END CERTIFICATE-----").next())
    else {
        return false;
    };
    let body: String = body.split_whitespace().collect();
    !body.is_empty()
        && base64::engine::general_purpose::STANDARD
            .decode(body)
            .is_ok()
}

/// `host:port` with a port in 1..=65535 (Go's `net.SplitHostPort` then the port check).
fn valid_server_address(addr: &str) -> bool {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return false;
    };
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner.ends_with(']')
    } else {
        !host.contains(':')
    };
    host_ok && matches!(port.parse::<u32>(), Ok(1..=65535))
}

/// Consul's `validatePeerName`: no upper case, and a DNS label.
pub fn validate_peer_name(name: &str) -> Result<(), String> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(format!(
            "{name} is not a valid peer name: cannot contain upper case characters"
        ));
    }
    let bytes = name.as_bytes();
    let label = !bytes.is_empty()
        && bytes.len() <= PEER_NAME_BYTES_MAX
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-';
    if !label {
        return Err(format!(
            "{name} is not a valid peer name: a valid DNS hostname label must contain \
             alphanumeric characters or '-', start and end with an alphanumeric character, \
             and be at most {PEER_NAME_BYTES_MAX} characters"
        ));
    }
    Ok(())
}

/// The SNI a cluster's servers answer peers under (Consul's `PeeringServerSAN`).
pub fn server_name(datacenter: &str, trust_domain: &str) -> String {
    format!("server.{datacenter}.peering.{trust_domain}")
}

/// `api.Peering`, in Consul's field order.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ApiPeering<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "empty_text")]
    partition: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    deleted_at: Option<&'a str>,
    #[serde(skip_serializing_if = "empty_map")]
    meta: &'a BTreeMap<String, String>,
    state: &'static str,
    #[serde(rename = "PeerID", skip_serializing_if = "empty_text")]
    peer_id: &'a str,
    #[serde(rename = "PeerCAPems", skip_serializing_if = "empty_list")]
    peer_ca_pems: &'a [String],
    #[serde(skip_serializing_if = "empty_text")]
    peer_server_name: &'a str,
    #[serde(skip_serializing_if = "empty_list")]
    peer_server_addresses: &'a [String],
    stream_status: ApiStreamStatus<'a>,
    create_index: u64,
    modify_index: u64,
    remote: ApiRemote<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ApiStreamStatus<'a> {
    imported_services: Option<&'a [String]>,
    exported_services: Option<&'a [String]>,
    last_heartbeat: Option<&'a str>,
    last_receive: Option<&'a str>,
    last_send: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ApiRemote<'a> {
    partition: &'a str,
    datacenter: &'a str,
}

// serde hands these a reference to the field, itself a reference.
fn empty_text(text: &&str) -> bool {
    text.is_empty()
}

fn empty_list(list: &&[String]) -> bool {
    list.is_empty()
}

fn empty_map(map: &&BTreeMap<String, String>) -> bool {
    map.is_empty()
}

fn some_list(list: &[String]) -> Option<&[String]> {
    (!list.is_empty()).then_some(list)
}

/// `peering` as Consul's HTTP API shows it.
pub fn api_peering(peering: &Peering) -> ApiPeering<'_> {
    let status = &peering.stream_status;
    let state = match peering.state {
        PeeringState::Undefined => PeeringState::Pending,
        other => other,
    };
    ApiPeering {
        id: &peering.id,
        name: &peering.name,
        partition: &peering.partition,
        deleted_at: peering.deleted_at.as_deref(),
        meta: &peering.meta,
        state: state.as_str(),
        peer_id: &peering.peer_id,
        peer_ca_pems: &peering.peer_ca_pems,
        peer_server_name: &peering.peer_server_name,
        peer_server_addresses: &peering.peer_server_addresses,
        stream_status: ApiStreamStatus {
            imported_services: some_list(&status.imported_services),
            exported_services: some_list(&status.exported_services),
            last_heartbeat: status.last_heartbeat.as_deref(),
            last_receive: status.last_receive.as_deref(),
            last_send: status.last_send.as_deref(),
        },
        create_index: peering.create_index,
        modify_index: peering.modify_index,
        remote: ApiRemote {
            partition: &peering.remote.partition,
            datacenter: &peering.remote.datacenter,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n";

    fn token() -> PeeringToken {
        PeeringToken {
            ca: Some(vec![PEM.into()]),
            manual_server_addresses: None,
            server_addresses: Some(vec!["127.0.0.2:8503".into()]),
            server_name: "server.dc1.peering.abc.consul".into(),
            peer_id: "9e8f3c2a-0000-4000-8000-000000000001".into(),
            establishment_secret: "5f1e".into(),
            remote: TokenRemote {
                partition: "default".into(),
                datacenter: "dc1".into(),
                locality: None,
            },
        }
    }

    #[test]
    fn tokens_encode_as_consul_and_decode_back() {
        let text = encode_token(&token());
        let json = base64::engine::general_purpose::STANDARD
            .decode(&text)
            .unwrap();
        let json = String::from_utf8(json).unwrap();
        assert!(json.starts_with(r#"{"CA":["-----BEGIN"#), "{json}");
        assert!(json.contains(r#""ManualServerAddresses":null,"ServerAddresses":["127.0.0.2:8503"],"ServerName":"server.dc1.peering.abc.consul","PeerID":"#));
        assert!(json
            .ends_with(r#""Remote":{"Partition":"default","Datacenter":"dc1","Locality":null}}"#));
        assert_eq!(decode_token(&text).unwrap(), token());
        assert_eq!(validate_token(&token()), Ok(()));
    }

    #[test]
    fn bad_tokens_get_consuls_errors() {
        assert_eq!(
            decode_token("not base64!").unwrap_err().to_string(),
            "failed to decode token: illegal base64 data at input byte 3"
        );
        let not_json = base64::engine::general_purpose::STANDARD.encode("{\"CA\":");
        assert_eq!(
            decode_token(&not_json).unwrap_err().to_string(),
            "unexpected end of JSON input"
        );
        let mut t = token();
        t.server_addresses = None;
        assert_eq!(validate_token(&t), Err(TokenError::EmptyServerAddresses));
        let mut t = token();
        t.server_addresses = Some(vec!["host-without-port".into()]);
        assert_eq!(
            validate_token(&t).unwrap_err().to_string(),
            "host-without-port is not a valid peering server address"
        );
        let mut t = token();
        t.ca = Some(vec!["junk".into()]);
        assert_eq!(validate_token(&t), Err(TokenError::InvalidCa));
        let mut t = token();
        t.server_name.clear();
        assert_eq!(validate_token(&t), Err(TokenError::EmptyServerName));
        let mut t = token();
        t.peer_id.clear();
        assert_eq!(validate_token(&t), Err(TokenError::EmptyPeerId));
        assert_eq!(
            decode_token(&"A".repeat(TOKEN_BYTES_MAX + 1)),
            Err(TokenError::TooLarge)
        );
    }

    #[test]
    fn peer_names_are_lower_case_dns_labels() {
        assert!(validate_peer_name("dc-2").is_ok());
        assert!(validate_peer_name("Dc2")
            .unwrap_err()
            .contains("upper case"));
        for bad in ["", "-a", "a-", "a.b", &"a".repeat(64)] {
            assert!(validate_peer_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn peerings_render_in_consuls_order() {
        let peering = Peering {
            id: "id".into(),
            name: "dc2".into(),
            state: PeeringState::Establishing,
            peer_id: "pid".into(),
            peer_server_addresses: vec!["1.2.3.4:8503".into()],
            create_index: 3,
            modify_index: 4,
            ..Default::default()
        };
        let json = serde_json::to_string(&api_peering(&peering)).unwrap();
        assert_eq!(
            json,
            r#"{"ID":"id","Name":"dc2","State":"ESTABLISHING","PeerID":"pid","PeerServerAddresses":["1.2.3.4:8503"],"StreamStatus":{"ImportedServices":null,"ExportedServices":null,"LastHeartbeat":null,"LastReceive":null,"LastSend":null},"CreateIndex":3,"ModifyIndex":4,"Remote":{"Partition":"","Datacenter":""}}"#
        );
    }
}
