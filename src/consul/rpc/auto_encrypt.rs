//! `AutoEncrypt.Sign`: a client agent's first certificate, asked for on byte 7 (TLS
//! without a client certificate, one msgpack net/rpc codec right after the handshake) and
//! renewed over its ordinary RPC session. The request is Consul's `CASignRequest` (the
//! agent's CSR names it by its SPIFFE ID, `spiffe://<trust domain>/agent/client/dc/<dc>/id/<node>`);
//! the answer is Consul's `SignedResponse`: the `IssuedCert`, the Connect CA's roots as
//! `IndexedCARoots` (the roots an agent certificate chains to), `ManualCARoots` (the CA the
//! servers' own certificates chain to, PEM), the gossip key (praetor hands none out) and
//! the servers' `VerifyServerHostname`.
//!
//! Bounds: the roots as [`super::connect_ca::read_ca_roots_whole`] bounds them, and at most
//! [`MANUAL_CA_ROOTS_MAX`] manual roots.

use super::connect_ca::{read_ca_roots_whole, read_issued_cert_from, write_ca_roots};
use super::connect_ca::{CaRootsReply, IssuedCert};
use super::{each_field, string_list, value_bytes, write_string_list, Fields, QueryMeta};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::mesh::ca::CaRoot;

/// Most `ManualCARoots` one answer may carry.
pub const MANUAL_CA_ROOTS_MAX: usize = 64;

/// What a server answers (the parts praetor's agents read back are owned in
/// [`SignedAgent`]).
pub struct SignedResponse<'a> {
    pub issued: IssuedCert<'a>,
    pub active_root_id: &'a str,
    pub trust_domain: &'a str,
    pub connect_ca_roots: &'a [std::sync::Arc<CaRoot>],
    pub manual_ca_roots: &'a [String],
    pub verify_server_hostname: bool,
}

impl SignedResponse<'_> {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 5);
        write_ca_roots(
            f.field("ConnectCARoots"),
            &QueryMeta::default(),
            self.active_root_id,
            self.trust_domain,
            self.connect_ca_roots,
        );
        f.field("GossipKey").str("");
        super::connect_ca::write_issued_cert(f.field("IssuedCert"), &self.issued);
        write_string_list(
            f.field("ManualCARoots"),
            self.manual_ca_roots.iter().map(String::as_str),
            true,
        );
        f.field("VerifyServerHostname")
            .bool(self.verify_server_hostname);
        f.finish();
        w.into_inner()
    }
}

/// A `SignedResponse` as a client agent keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignedAgent {
    /// The agent's certificate and the chain to its root, PEM.
    pub certificate_pem: String,
    /// End of the certificate's validity, Unix seconds.
    pub valid_before_unix_s: i64,
    pub connect_ca_roots: CaRootsReply,
    pub manual_ca_roots: Vec<String>,
    pub verify_server_hostname: bool,
}

/// Reads a `SignedResponse`; a certificate without PEM is refused.
pub fn read_signed_response(body: &[u8]) -> Result<SignedAgent, WireError> {
    let mut signed = SignedAgent::default();
    each_field(&mut Reader::new(body), |name, r| {
        match name {
            "IssuedCert" => {
                let issued = read_issued_cert_from(r)?;
                signed.certificate_pem = issued.cert_pem.to_string();
                signed.valid_before_unix_s = issued.valid_before_unix_s;
            }
            "ConnectCARoots" => {
                if !r.try_nil()? {
                    signed.connect_ca_roots = read_ca_roots_whole(value_bytes(r)?)?.1;
                }
            }
            "ManualCARoots" => {
                if !r.try_nil()? {
                    let roots = string_list(r)?;
                    if roots.len() > MANUAL_CA_ROOTS_MAX {
                        return Err(WireError::TooLarge {
                            what: "manual CA roots of one answer",
                            limit: MANUAL_CA_ROOTS_MAX,
                        });
                    }
                    signed.manual_ca_roots = roots.iter().map(|s| s.to_string()).collect();
                }
            }
            "VerifyServerHostname" => signed.verify_server_hostname = r.bool()?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if signed.certificate_pem.is_empty() {
        return Err(WireError::Invalid(
            "a signed response without a certificate",
        ));
    }
    Ok(signed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_signed_response_reads_back_what_the_agent_needs() {
        let root = Arc::new(CaRoot {
            id: "aa:bb".into(),
            name: "agent CA".into(),
            root_cert_pem: "-----BEGIN CERTIFICATE-----\nroot\n".into(),
            active: true,
            ..CaRoot::default()
        });
        let manual = vec!["-----BEGIN CERTIFICATE-----\nservers\n".to_string()];
        let body = SignedResponse {
            issued: IssuedCert {
                serial_number: "01",
                agent: "web-1",
                agent_uri: "spiffe://t.consul/agent/client/dc/dc1/id/web-1",
                cert_pem: "-----BEGIN CERTIFICATE-----\nleaf\n",
                valid_after_unix_s: 1_700_000_000,
                valid_before_unix_s: 1_700_259_200,
                ..IssuedCert::default()
            },
            active_root_id: "aa:bb",
            trust_domain: "t.consul",
            connect_ca_roots: &[root],
            manual_ca_roots: &manual,
            verify_server_hostname: true,
        }
        .encode();
        let signed = read_signed_response(&body).unwrap();
        assert_eq!(
            signed.certificate_pem,
            "-----BEGIN CERTIFICATE-----\nleaf\n"
        );
        assert_eq!(signed.valid_before_unix_s, 1_700_259_200);
        assert_eq!(signed.connect_ca_roots.trust_domain, "t.consul");
        assert_eq!(signed.connect_ca_roots.roots.len(), 1);
        assert_eq!(
            &*signed.connect_ca_roots.roots[0].root_cert_pem,
            "-----BEGIN CERTIFICATE-----\nroot\n"
        );
        assert_eq!(signed.manual_ca_roots, manual);
        assert!(signed.verify_server_hostname);
        // An answer without a certificate, or that is not a map, is refused.
        let mut w = Writer::new();
        w.map_len(0);
        assert!(read_signed_response(&w.into_inner()).is_err());
        assert!(read_signed_response(b"\xc1").is_err());
    }
}
