//! Auto-encrypt, the servers' side: servers hand client agents their TLS certificates over
//! the server port, as Consul's `AutoEncrypt.Sign` does (the call itself is served by the
//! typed-call table, `api::rpc::auto_encrypt`; the client agents' side is
//! `agent::auto_encrypt`).
//!
//! Servers (`auto_encrypt { allow_tls = true }`):
//! - The signing root is the Connect CA's active root when the mesh is on (Consul's rule: one
//!   root and trust domain for agents and services); with the mesh off, [`agent_ca_keeper`]
//!   (shard 0), when this server leads and the replicated state has no agent CA yet,
//!   generates one (`tls::agent_ca`) and proposes it (`store::agent_ca`); a racing second
//!   leader's proposal is refused by the store, so the cluster keeps one root. On every
//!   server the keeper installs every replicated root an agent certificate may chain to into
//!   the TLS configurations, so certificates it signed pass `verify_incoming`.
//! - [`sign`] signs one request: on the insecure TLS session (byte 7, no client certificate
//!   yet: the first request) and on ordinary RPC sessions (renewals, with the certificate
//!   being renewed). Any server holding the root signs; the root and its key are
//!   replicated, so no forwarding to the leader is needed. The node is the one the
//!   request's SPIFFE ID names; with ACLs on, the request's token needs `node:write` on it,
//!   as Consul's CA demands.

use crate::shard::runtime::Shard;
use crate::store::acl::cache::{AuthorizerCache, CompileSettings};
use crate::store::agent_ca::{AgentCaOp, AgentCaRow};
use crate::store::mesh::ca::CaRoot;
use crate::store::Command;
use crate::tls::agent_ca::{
    agent_of_request, agent_spiffe_id, generate_root, AgentCaRoot, AgentSignRequest, AgentSigner,
    SignError, SignedAgentCertificate,
};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How often the keeper looks at the replicated root and the leadership.
const KEEPER_INTERVAL: Duration = Duration::from_millis(500);
/// Consul's answer when the server does not allow auto-encrypt.
pub const NOT_ALLOWED: &str = "AutoEncrypt.AllowTLS must be enabled in order to use this endpoint";

// ---------------------------------------------------------------------------------------
// Servers

/// Shard 0 of a server with `allow_tls`: keeps the TLS configurations trusting every root an
/// agent certificate may chain to (the Connect CA's roots, rotated-out ones included, and
/// the agent CA's), and, with the mesh off, creates the agent CA when leading and none
/// exists. With the mesh on, the Connect CA's leader duty creates the root that signs.
pub async fn agent_ca_keeper(shard: Rc<Shard>) {
    let tls = shard.shared().tls.clone();
    let connect_enabled = shard.config().connect.enabled;
    let mut trusted_pem = String::new();
    loop {
        if shard.shutting_down() {
            return;
        }
        let version = shard.current_version();
        let roots_pem = agent_roots_pem(&version);
        if !roots_pem.is_empty() && roots_pem != trusted_pem {
            match tls.trust_agent_ca(&roots_pem) {
                Ok(_) => {
                    log::info!(
                        "auto_encrypt: trusting the agent certificate roots of {} ({} Connect CA root(s), agent CA: {})",
                        signing_trust_domain(&version).unwrap_or_default(),
                        version.mesh.ca.roots.len(),
                        if version.agent_ca.is_some() { "yes" } else { "no" },
                    );
                    trusted_pem = roots_pem;
                }
                Err(e) => log::error!("auto_encrypt: cannot use the agent CA: {e}"),
            }
        }
        // One proposal at a time: the keeper waits for its outcome.
        if !connect_enabled && version.agent_ca.is_none() && shard.is_leader() {
            create_agent_ca(&shard).await;
        }
        monoio::time::sleep(KEEPER_INTERVAL).await;
    }
}

/// Every root an agent certificate signed in this cluster may chain to, PEM, concatenated:
/// each Connect CA root (rotated-out roots stay trusted while they are kept), in a
/// secondary datacenter also the intermediate that signs there, and the agent CA's root.
fn agent_roots_pem(version: &crate::store::Tables) -> String {
    let mut pem = String::new();
    let connect_roots = version.mesh.ca.roots.iter().flat_map(|r| {
        let intermediate = (!r.signing_cert_pem.is_empty()).then_some(&*r.signing_cert_pem);
        std::iter::once(&*r.root_cert_pem).chain(intermediate)
    });
    let agent_root = version.agent_ca.as_ref().map(|row| &*row.certificate_pem);
    for root in connect_roots.chain(agent_root) {
        pem.push_str(root.trim_end());
        pem.push('\n');
    }
    pem
}

/// The root that signs agent certificates: the Connect CA's active root once the mesh has
/// one (as Consul's auto-encrypt signs with its Connect CA, so agents and services share a
/// root and a trust domain) — in a secondary datacenter its intermediate, whose key is the
/// one held here — else the agent CA.
fn agent_signer(version: &crate::store::Tables) -> Option<AgentCaRoot> {
    let connect = &version.mesh.ca;
    if let (Some(root), Some(trust_domain)) = (connect.active_root(), connect.trust_domain()) {
        return Some(AgentCaRoot {
            trust_domain,
            certificate_pem: root.signer_cert_pem().to_string(),
            private_key_pem: root.signing_key_pem.to_string(),
        });
    }
    version.agent_ca.as_ref().map(|row| AgentCaRoot {
        trust_domain: row.trust_domain.clone(),
        certificate_pem: row.certificate_pem.clone(),
        private_key_pem: row.private_key_pem.clone(),
    })
}

fn signing_trust_domain(version: &crate::store::Tables) -> Option<String> {
    agent_signer(version).map(|root| root.trust_domain)
}

async fn create_agent_ca(shard: &Shard) {
    let trust_domain = format!("{}.consul", uuid::Uuid::new_v4());
    let root = match generate_root(&trust_domain, time::OffsetDateTime::now_utc()) {
        Ok(root) => root,
        Err(e) => {
            log::error!("auto_encrypt: cannot create the agent CA: {e}");
            return;
        }
    };
    let command = Command::AgentCa(AgentCaOp::Initialize(AgentCaRow {
        trust_domain: root.trust_domain,
        certificate_pem: root.certificate_pem,
        private_key_pem: root.private_key_pem,
        created_index: 0,
    }));
    let result = shard.propose(command.encode()).await;
    log::info!("auto_encrypt: proposed a new agent CA for {trust_domain}: {result:?}");
}

/// An agent's certificate request, as `AutoEncrypt.Sign` carries it.
#[derive(Clone, Copy, Debug)]
pub struct AgentCertificateRequest<'a> {
    pub datacenter: &'a str,
    pub csr_pem: &'a str,
    /// The agent's ACL token (Consul's `WriteRequest.Token`); empty for none.
    pub token: &'a str,
}

/// A signed agent certificate and what the agent needs with it (Consul's
/// `SignedResponse`).
#[derive(Clone, Debug)]
pub struct AgentCertificate {
    /// The node the request named, and its SPIFFE ID under the signing trust domain.
    pub node: String,
    pub agent_uri: String,
    pub signed: SignedAgentCertificate,
    /// The roots an agent certificate chains to (Consul's `ConnectCARoots`).
    pub trust_domain: String,
    pub active_root_id: String,
    pub roots: Vec<Arc<CaRoot>>,
    /// The CA the servers' own certificates chain to, PEM (Consul's `ManualCARoots`).
    pub server_ca_roots_pem: Vec<String>,
    pub verify_server_hostname: bool,
}

/// Signs one agent's certificate (`AutoEncrypt.Sign`), or says why not in Consul's words.
/// The node is the one the request's SPIFFE ID names, as Consul's server reads it.
pub fn sign(shard: &Shard, request: &AgentCertificateRequest) -> Result<AgentCertificate, String> {
    let config = shard.config();
    if !(config.server && config.tls.auto_encrypt.allow_tls) {
        return Err(NOT_ALLOWED.to_string());
    }
    if request.datacenter != config.datacenter {
        // Consul's text: a certificate of another datacenter would not be valid here.
        return Err(format!(
            "mismatched datacenter (client_dc='{}' server_dc='{}'); check client has same datacenter set as servers",
            request.datacenter, config.datacenter
        ));
    }
    let (_, node) = agent_of_request(request.csr_pem)?;
    let version = shard.current_version();
    if config.acl.enabled {
        // Consul's CA signs an agent's certificate for a token with node:write on it.
        let mut authorizers = AuthorizerCache::new(CompileSettings {
            datacenter: config.datacenter.clone(),
            default_policy: config.acl.default_policy,
        });
        let now_unix_ns = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as i64;
        let resolved = authorizers
            .resolve(&version, request.token, now_unix_ns)
            .map_err(|e| e.message())?;
        if let Err(denial) = resolved.authorizer.node_write(&node) {
            return Err(format!(
                "Permission denied: token with AccessorID '{}' lacks permission '{}' on {:?}",
                resolved.accessor_id,
                denial.permission(),
                node
            ));
        }
    }
    let Some(root) = agent_signer(&version) else {
        return Err("the CA is not initialized yet (the leader creates it); try again".to_string());
    };
    let signed = root
        .sign_agent(
            &AgentSignRequest {
                csr_pem: request.csr_pem,
                node: &node,
                datacenter: request.datacenter,
                domain: &config.dns.domain,
            },
            time::OffsetDateTime::now_utc(),
        )
        .map_err(|e| match e {
            SignError::Refused(why) | SignError::Failed(why) => why,
        })?;
    let (active_root_id, roots) = match version.mesh.ca.active_root() {
        Some(active) => (active.id.to_string(), version.mesh.ca.roots.clone()),
        None => {
            let root = agent_ca_root(&root.certificate_pem, &root.trust_domain);
            (root.id.to_string(), vec![Arc::new(root)])
        }
    };
    let tls = &shard.shared().tls;
    Ok(AgentCertificate {
        agent_uri: agent_spiffe_id(&root.trust_domain, request.datacenter, &node),
        node,
        signed,
        trust_domain: root.trust_domain,
        active_root_id,
        roots,
        server_ca_roots_pem: tls.internal_rpc_ca_pem(),
        verify_server_hostname: config.tls.internal_rpc.verify_server_hostname,
    })
}

/// The agent CA (the mesh being off) as the one root of `ConnectCARoots`: its ID is its
/// fingerprint, as a Connect root's is.
fn agent_ca_root(certificate_pem: &str, trust_domain: &str) -> CaRoot {
    use rustls::pki_types::pem::PemObject;
    let id = rustls::pki_types::CertificateDer::from_pem_slice(certificate_pem.as_bytes())
        .map(|der| crate::tls::connect_ca::fingerprint(&der))
        .unwrap_or_default();
    CaRoot {
        id: id.as_str().into(),
        name: "praetor agent CA".into(),
        external_trust_domain: trust_domain.into(),
        root_cert_pem: certificate_pem.into(),
        active: true,
        ..CaRoot::default()
    }
}
