//! The payloads of auto-encrypt's one request, `AutoEncrypt.Sign`, carried in RPC frames
//! ([`super::rpc::kind::AUTO_ENCRYPT_SIGN`] and [`super::rpc::kind::AUTO_ENCRYPT_SIGNED`])
//! on the server port, as msgpack. The fields are Consul's `CASignRequest` and
//! `SignedResponse` that praetor uses.
//!
//! Bounds: a payload larger than [`SIGN_PAYLOAD_BYTES_MAX`] is refused before decoding.

use serde::{Deserialize, Serialize};

/// Largest request or response payload, in bytes.
pub const SIGN_PAYLOAD_BYTES_MAX: usize = 64 * 1024;

/// A client agent asks for its certificate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignRequest {
    pub datacenter: String,
    /// The agent's node name: its certificate's identity.
    pub node: String,
    /// The certificate request, PEM.
    pub csr_pem: String,
    /// The agent's ACL token (Consul's `WriteRequest.Token`); empty for none.
    pub token: String,
}

/// What the server answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignResponse {
    /// The agent's certificate, PEM.
    pub certificate_pem: String,
    /// The agent CA's roots, PEM (Consul's `ConnectCARoots`).
    pub agent_ca_roots_pem: Vec<String>,
    /// The CA the servers' own certificates chain to, PEM (Consul's `ManualCARoots`).
    pub server_ca_roots_pem: Vec<String>,
    /// End of the certificate's validity, Unix seconds.
    pub not_after_unix: i64,
    /// The servers' `verify_server_hostname` (Consul's `VerifyServerHostname`).
    pub verify_server_hostname: bool,
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("encoding into a Vec cannot fail")
}

fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T, String> {
    if bytes.len() > SIGN_PAYLOAD_BYTES_MAX {
        return Err(format!(
            "{what} of {} bytes is larger than {SIGN_PAYLOAD_BYTES_MAX}",
            bytes.len()
        ));
    }
    rmp_serde::from_slice(bytes).map_err(|e| format!("malformed {what}: {e}"))
}

impl SignRequest {
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }
    pub fn decode(bytes: &[u8]) -> Result<SignRequest, String> {
        decode(bytes, "AutoEncrypt.Sign request")
    }
}

impl SignResponse {
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }
    pub fn decode(bytes: &[u8]) -> Result<SignResponse, String> {
        decode(bytes, "AutoEncrypt.Sign response")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_garbage_is_an_error() {
        let request = SignRequest {
            datacenter: "dc1".into(),
            node: "web-1".into(),
            csr_pem: "-----BEGIN CERTIFICATE REQUEST-----".into(),
            token: String::new(),
        };
        assert_eq!(SignRequest::decode(&request.encode()).unwrap(), request);
        let response = SignResponse {
            certificate_pem: "leaf".into(),
            agent_ca_roots_pem: vec!["root".into()],
            server_ca_roots_pem: vec!["ca".into()],
            not_after_unix: 1_800_000_000,
            verify_server_hostname: true,
        };
        assert_eq!(SignResponse::decode(&response.encode()).unwrap(), response);
        assert!(SignRequest::decode(b"\xc1garbage").is_err());
        assert!(SignResponse::decode(&request.encode()).is_err());
        let huge = vec![0u8; SIGN_PAYLOAD_BYTES_MAX + 1];
        assert!(SignRequest::decode(&huge)
            .unwrap_err()
            .ends_with(&format!("larger than {SIGN_PAYLOAD_BYTES_MAX}")));
    }
}
