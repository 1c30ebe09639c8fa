//! `AutoEncrypt.Sign`, as Consul's `auto_encrypt_endpoint.go` serves it: a client agent's
//! certificate, signed by any server holding the replicated root (no forwarding to the
//! leader, nor to another datacenter: the request must name this one). It arrives on the
//! insecure session (byte 7: the agent has no certificate yet) or on an ordinary one (a
//! renewal). The checks and the signing are the shard's (`shard::auto_encrypt::sign`);
//! this is the call's decoding and Consul's `SignedResponse`.

use super::{decode_error, Answer};
use crate::api::server::Server;
use crate::consul::rpc::auto_encrypt::SignedResponse;
use crate::consul::rpc::connect_ca::{CaSignRequest, IssuedCert};
use crate::shard::auto_encrypt::AgentCertificateRequest;
use crate::shard::rpc_server::TypedCall;

/// `AutoEncrypt.Sign`.
pub fn sign(server: &Server, call: &TypedCall) -> Answer {
    let request = CaSignRequest::decode(&call.body).map_err(decode_error)?;
    let signed = server
        .context()
        .sign_agent_certificate(&AgentCertificateRequest {
            datacenter: request.datacenter,
            csr_pem: request.csr,
            token: request.token,
        })
        .inspect_err(|why| {
            log::warn!(
                "auto_encrypt: refused a certificate request from {}: {why}",
                call.peer
            )
        })?;
    Ok(SignedResponse {
        issued: IssuedCert {
            serial_number: &signed.signed.serial_number,
            agent: &signed.node,
            agent_uri: &signed.agent_uri,
            cert_pem: &signed.signed.certificate_pem,
            valid_after_unix_s: signed.signed.not_before_unix,
            valid_before_unix_s: signed.signed.not_after_unix,
            ..IssuedCert::default()
        },
        active_root_id: &signed.active_root_id,
        trust_domain: &signed.trust_domain,
        connect_ca_roots: &signed.roots,
        manual_ca_roots: &signed.server_ca_roots_pem,
        verify_server_hostname: signed.verify_server_hostname,
    }
    .encode())
}
