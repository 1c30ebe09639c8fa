//! The servers' agent CA for auto-encrypt: a root certificate and key that the leader
//! generates once and the servers keep in Raft (the root the built-in Connect CA will use),
//! and the one operation auto-encrypt needs from it, behind [`AgentSigner`]: *sign this
//! certificate request for agent `<node>` in `<datacenter>`, return the chain*.
//!
//! What a client agent may get signed is narrow, whatever its request says:
//! - its identity is the SPIFFE ID Consul gives agents,
//!   `spiffe://<trust domain>/agent/client/dc/<datacenter>/id/<node>`, and the request must
//!   name exactly one URI with that path. The trust domain in the request is not checked: a
//!   client asks before it can know it (it writes [`UNKNOWN_TRUST_DOMAIN`], as Consul's
//!   client does), and the leaf always carries the CA's own;
//! - DNS names and IP addresses come from the request (`localhost`, 127.0.0.1 and
//!   `auto_encrypt { dns_san, ip_san }`), at most [`AGENT_SANS_MAX`] of them, and never the
//!   server name `server.<datacenter>.<domain>` or anything under it: a certificate from this
//!   CA can never pass the server-role check (CVE-2021-37219), which in any case trusts only
//!   the operator's CA;
//! - it is a leaf (not a CA), for client and server authentication, valid
//!   [`AGENT_CERT_TTL`] (Consul's `leaf_cert_ttl` default).
//!
//! Not pure: keys and serial numbers come from the system's randomness. Time arrives as an
//! argument, so validity is testable.

use super::generate::{ca_params, new_key, parse_signing_key, random_serial};
use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyUsagePurpose, SanType,
};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use time::{Duration, OffsetDateTime};

/// How long an agent certificate is valid: Consul's `leaf_cert_ttl` default, 72 hours.
pub const AGENT_CERT_TTL: Duration = Duration::hours(72);
/// How long the root is valid: Consul's `root_cert_ttl` default, 10 years.
pub const ROOT_CERT_TTL: Duration = Duration::days(3650);
/// Most DNS names and IP addresses one agent certificate may carry.
pub const AGENT_SANS_MAX: usize = 66;
/// The trust domain a client agent puts in its first request, before it knows the cluster's.
pub const UNKNOWN_TRUST_DOMAIN: &str = "unknown.consul";
/// Largest certificate request accepted, in bytes of PEM.
pub const CSR_PEM_BYTES_MAX: usize = 16 * 1024;
/// How far before "now" a certificate starts, so a peer whose clock is a little behind
/// already accepts it (Consul backdates by a minute).
const BACKDATE: Duration = Duration::minutes(1);

/// The root the servers keep: what is replicated, key included (as Consul's built-in
/// provider keeps its key in the state store).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCaRoot {
    /// The SPIFFE trust domain, `<cluster id>.consul`.
    pub trust_domain: String,
    pub certificate_pem: String,
    pub private_key_pem: String,
}

/// What a client agent asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSignRequest<'a> {
    pub csr_pem: &'a str,
    pub node: &'a str,
    pub datacenter: &'a str,
    /// The cluster's DNS domain (`consul`), for the names an agent may never carry.
    pub domain: &'a str,
}

/// A signed agent certificate and the root it chains to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedAgentCertificate {
    pub certificate_pem: String,
    /// The certificate's serial number, in decimal.
    pub serial_number: String,
    pub root_pem: String,
    /// Start of validity, Unix seconds.
    pub not_before_unix: i64,
    /// End of validity, Unix seconds: when to have renewed it by.
    pub not_after_unix: i64,
}

/// Why a request was not signed; `Display` is the answer's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignError {
    /// The request is malformed or asks for what this agent may not have (HTTP 400).
    Refused(String),
    /// The CA itself failed (HTTP 500).
    Failed(String),
}

impl std::fmt::Display for SignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignError::Refused(why) | SignError::Failed(why) => write!(f, "{why}"),
        }
    }
}

/// Signs agent certificates. The servers' implementation is [`AgentCaRoot`]; the Connect
/// CA can take its place without the auto-encrypt endpoint changing.
pub trait AgentSigner {
    fn sign_agent(
        &self,
        request: &AgentSignRequest<'_>,
        now: OffsetDateTime,
    ) -> Result<SignedAgentCertificate, SignError>;
}

/// Consul's SPIFFE ID of a client agent.
pub fn agent_spiffe_id(trust_domain: &str, datacenter: &str, node: &str) -> String {
    format!("spiffe://{trust_domain}/agent/client/dc/{datacenter}/id/{node}")
}

/// A new root for `trust_domain` (`<cluster id>.consul`), valid [`ROOT_CERT_TTL`] from `now`.
pub fn generate_root(trust_domain: &str, now: OffsetDateTime) -> Result<AgentCaRoot, String> {
    let key = new_key()?;
    let mut params = ca_params(
        random_serial().0,
        now - BACKDATE,
        now + ROOT_CERT_TTL,
        format!("praetor CA {trust_domain}"),
    );
    let uri = format!("spiffe://{trust_domain}")
        .try_into()
        .map_err(|_| format!("{trust_domain:?} is not a valid trust domain"))?;
    params.subject_alt_names = vec![SanType::URI(uri)];
    let certificate = params
        .self_signed(&key)
        .map_err(|e| format!("error generating the agent CA: {e}"))?;
    Ok(AgentCaRoot {
        trust_domain: trust_domain.to_string(),
        certificate_pem: certificate.pem(),
        private_key_pem: key.serialize_pem(),
    })
}

/// Who a client agent's certificate request names, as Consul's `AutoEncrypt.Sign` reads
/// it from the request's SPIFFE ID (`spiffe://<trust domain>/agent/client/dc/<dc>/id/<node>`):
/// (datacenter, node). The trust domain is the CA's to decide, so any is accepted here.
pub fn agent_of_request(csr_pem: &str) -> Result<(String, String), String> {
    if csr_pem.len() > CSR_PEM_BYTES_MAX {
        return Err(format!(
            "certificate request larger than {CSR_PEM_BYTES_MAX} bytes"
        ));
    }
    let csr = CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| format!("invalid certificate request: {e}"))?;
    let agent = csr.params.subject_alt_names.iter().find_map(|san| {
        let SanType::URI(uri) = san else {
            return None;
        };
        let rest = uri.as_str().strip_prefix("spiffe://")?;
        let path = &rest[rest.find('/')?..];
        let (datacenter, node) = path.strip_prefix("/agent/client/dc/")?.split_once("/id/")?;
        (!datacenter.is_empty() && !node.is_empty() && !node.contains('/'))
            .then(|| (datacenter.to_string(), node.to_string()))
    });
    agent.ok_or_else(|| "certificate request does not name a client agent's SPIFFE ID".to_string())
}

/// A client agent's key and certificate request: (CSR PEM, private key PEM). The request
/// names the agent's SPIFFE ID, `localhost`, 127.0.0.1 and the extra names given.
pub fn agent_csr(
    trust_domain: &str,
    datacenter: &str,
    node: &str,
    dns_san: &[String],
    ip_san: &[IpAddr],
) -> Result<(String, String), String> {
    let key = new_key()?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, node.to_string());
    params.distinguished_name = name;
    let uri = agent_spiffe_id(trust_domain, datacenter, node)
        .try_into()
        .map_err(|_| format!("node name {node:?} cannot be part of a SPIFFE ID"))?;
    params.subject_alt_names.push(SanType::URI(uri));
    for dns in std::iter::once("localhost").chain(dns_san.iter().map(String::as_str)) {
        let ia5 = dns
            .to_string()
            .try_into()
            .map_err(|_| format!("{dns:?} is not a valid DNS name"))?;
        params.subject_alt_names.push(SanType::DnsName(ia5));
    }
    let loopback: IpAddr = [127, 0, 0, 1].into();
    params.subject_alt_names.extend(
        std::iter::once(loopback)
            .chain(ip_san.iter().copied())
            .map(SanType::IpAddress),
    );
    let request = params
        .serialize_request(&key)
        .map_err(|e| format!("failed to create the certificate request: {e}"))?;
    let pem = request
        .pem()
        .map_err(|e| format!("failed to encode the certificate request: {e}"))?;
    Ok((pem, key.serialize_pem()))
}

/// Whether `name` is the servers' name or under it (`<node>.server.<dc>.<domain>`).
fn is_server_name(name: &str, datacenter: &str, domain: &str) -> bool {
    let server = format!("server.{datacenter}.{domain}").to_ascii_lowercase();
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == server || name.ends_with(&format!(".{server}"))
}

impl AgentSigner for AgentCaRoot {
    fn sign_agent(
        &self,
        request: &AgentSignRequest<'_>,
        now: OffsetDateTime,
    ) -> Result<SignedAgentCertificate, SignError> {
        let refuse = |why: String| Err(SignError::Refused(why));
        if request.csr_pem.len() > CSR_PEM_BYTES_MAX {
            return refuse(format!(
                "certificate request larger than {CSR_PEM_BYTES_MAX} bytes"
            ));
        }
        let csr = CertificateSigningRequestParams::from_pem(request.csr_pem)
            .map_err(|e| SignError::Refused(format!("invalid certificate request: {e}")))?;
        let expected = agent_spiffe_id(&self.trust_domain, request.datacenter, request.node);
        let mut uris = Vec::new();
        let mut sans = Vec::new();
        for san in &csr.params.subject_alt_names {
            match san {
                SanType::URI(uri) => uris.push(uri.as_str().to_string()),
                SanType::DnsName(dns) => {
                    if is_server_name(dns.as_str(), request.datacenter, request.domain) {
                        return refuse(format!(
                            "an agent certificate may not name {} (the servers' name)",
                            dns.as_str()
                        ));
                    }
                    sans.push(san.clone());
                }
                SanType::IpAddress(_) => sans.push(san.clone()),
                other => return refuse(format!("unsupported name in the request: {other:?}")),
            }
        }
        let path = format!(
            "/agent/client/dc/{}/id/{}",
            request.datacenter, request.node
        );
        let names_the_agent = |uri: &str| {
            uri.strip_prefix("spiffe://")
                .and_then(|rest| rest.find('/').map(|slash| &rest[slash..]))
                == Some(path.as_str())
        };
        if !matches!(uris.as_slice(), [uri] if names_the_agent(uri)) {
            return refuse(format!(
                "the request must name exactly one SPIFFE ID, spiffe://<trust domain>{path}; it names {uris:?}"
            ));
        }
        if sans.len() > AGENT_SANS_MAX {
            return refuse(format!(
                "at most {AGENT_SANS_MAX} DNS names and IP addresses, got {}",
                sans.len()
            ));
        }
        let key = parse_signing_key(&self.private_key_pem).map_err(SignError::Failed)?;
        let issuer = Issuer::from_ca_cert_pem(&self.certificate_pem, key)
            .map_err(|e| SignError::Failed(format!("the agent CA is unusable: {e}")))?;
        // Only what the request may decide is taken from it; the rest is the CA's.
        let mut params = CertificateParams::default();
        let (serial, serial_decimal) = random_serial();
        params.serial_number = Some(serial);
        params.not_before = now - BACKDATE;
        params.not_after = now + AGENT_CERT_TTL;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, request.node.to_string());
        params.distinguished_name = name;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let uri = expected
            .try_into()
            .map_err(|_| SignError::Refused("invalid SPIFFE ID".to_string()))?;
        params.subject_alt_names = std::iter::once(SanType::URI(uri)).chain(sans).collect();
        let signed = CertificateSigningRequestParams {
            params,
            public_key: csr.public_key,
        }
        .signed_by(&issuer)
        .map_err(|e| SignError::Failed(format!("failed to sign: {e}")))?;
        Ok(SignedAgentCertificate {
            certificate_pem: signed.pem(),
            serial_number: serial_decimal,
            root_pem: self.certificate_pem.clone(),
            not_before_unix: (now - BACKDATE).unix_timestamp(),
            not_after_unix: (now + AGENT_CERT_TTL).unix_timestamp(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, UnixTime};
    use std::sync::Arc;

    const TRUST_DOMAIN: &str = "11111111-2222-3333-4444-555555555555.consul";

    fn request<'a>(csr: &'a str, node: &'a str) -> AgentSignRequest<'a> {
        AgentSignRequest {
            csr_pem: csr,
            node,
            datacenter: "dc1",
            domain: "consul",
        }
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    /// What a server with `verify_incoming` does with a client certificate: verify it
    /// against the root as a client certificate, at `at`.
    fn client_verifier_accepts(root: &AgentCaRoot, leaf: &str, at: OffsetDateTime) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der(&root.certificate_pem)).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            super::super::files::crypto_provider(),
        )
        .build()
        .unwrap();
        let at =
            UnixTime::since_unix_epoch(std::time::Duration::from_secs(at.unix_timestamp() as u64));
        verifier.verify_client_cert(&der(leaf), &[], at).is_ok()
    }

    #[test]
    fn an_agent_request_is_signed_as_a_client_of_the_root_for_72_hours() {
        let now = OffsetDateTime::now_utc();
        let root = generate_root(TRUST_DOMAIN, now).unwrap();
        let (csr, _key) = agent_csr(
            TRUST_DOMAIN,
            "dc1",
            "web-1",
            &["web-1.internal".to_string()],
            &["10.0.0.7".parse().unwrap()],
        )
        .unwrap();
        let signed = root.sign_agent(&request(&csr, "web-1"), now).unwrap();
        assert_eq!(signed.root_pem, root.certificate_pem);
        assert_eq!(
            signed.not_after_unix,
            (now + Duration::hours(72)).unix_timestamp()
        );
        assert!(client_verifier_accepts(&root, &signed.certificate_pem, now));
        assert!(!client_verifier_accepts(
            &root,
            &signed.certificate_pem,
            now + Duration::hours(73)
        ));
        // Another root does not vouch for it.
        let other = generate_root(TRUST_DOMAIN, now).unwrap();
        assert!(!client_verifier_accepts(
            &other,
            &signed.certificate_pem,
            now
        ));
        // The names: the SPIFFE ID, localhost, 127.0.0.1 and the extras; not a CA.
        use x509_parser::prelude::{FromDer, X509Certificate};
        let leaf = der(&signed.certificate_pem);
        let (_, parsed) = X509Certificate::from_der(&leaf).unwrap();
        use x509_parser::extensions::GeneralName;
        let names: Vec<String> = parsed
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|name| match name {
                GeneralName::URI(uri) => uri.to_string(),
                GeneralName::DNSName(dns) => dns.to_string(),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).unwrap()).to_string(),
                    16 => {
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*bytes).unwrap()).to_string()
                    }
                    _ => format!("{bytes:?}"),
                },
                other => format!("{other:?}"),
            })
            .collect();
        for expected in [
            "spiffe://11111111-2222-3333-4444-555555555555.consul/agent/client/dc/dc1/id/web-1",
            "localhost",
            "web-1.internal",
            "127.0.0.1",
            "10.0.0.7",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} missing from {names:?}"
            );
        }
        assert!(!parsed.is_ca());
    }

    #[test]
    fn requests_for_another_identity_or_the_server_name_are_refused() {
        let now = OffsetDateTime::now_utc();
        let root = generate_root(TRUST_DOMAIN, now).unwrap();
        // A request made for web-1 presented as web-2.
        let (csr, _) = agent_csr(TRUST_DOMAIN, "dc1", "web-1", &[], &[]).unwrap();
        let error = root.sign_agent(&request(&csr, "web-2"), now).unwrap_err();
        assert!(
            matches!(&error, SignError::Refused(why) if why.starts_with("the request must name exactly one SPIFFE ID, spiffe://<trust domain>/agent/client/dc/dc1/id/web-2; it names")),
            "{error}"
        );
        // The trust domain a client writes before it knows the cluster's is replaced by the
        // CA's own. The request names its agent whatever the trust domain; garbage, or a
        // request naming no agent, is refused.
        let (csr, _) = agent_csr(UNKNOWN_TRUST_DOMAIN, "dc1", "web-1", &[], &[]).unwrap();
        assert_eq!(
            agent_of_request(&csr).unwrap(),
            ("dc1".to_string(), "web-1".to_string())
        );
        assert!(agent_of_request("not a CSR")
            .unwrap_err()
            .starts_with("invalid certificate request"));
        let mut service = CertificateParams::default();
        service.subject_alt_names = vec![SanType::URI(
            "spiffe://t.consul/ns/default/dc/dc1/svc/web"
                .try_into()
                .unwrap(),
        )];
        let service_csr = service
            .serialize_request(&new_key().unwrap())
            .unwrap()
            .pem()
            .unwrap();
        assert_eq!(
            agent_of_request(&service_csr).unwrap_err(),
            "certificate request does not name a client agent's SPIFFE ID"
        );
        let signed = root.sign_agent(&request(&csr, "web-1"), now).unwrap();
        use x509_parser::prelude::{FromDer, X509Certificate};
        let leaf = der(&signed.certificate_pem);
        let (_, parsed) = X509Certificate::from_der(&leaf).unwrap();
        let names = format!(
            "{:?}",
            parsed.subject_alternative_name().unwrap().unwrap().value
        );
        assert!(names.contains(&agent_spiffe_id(TRUST_DOMAIN, "dc1", "web-1")));
        assert!(!names.contains(UNKNOWN_TRUST_DOMAIN));
        // The servers' name, in any letter case or under it.
        for name in [
            "server.dc1.consul",
            "SERVER.dc1.consul.",
            "node1.server.dc1.consul",
        ] {
            let (csr, _) = agent_csr(TRUST_DOMAIN, "dc1", "web-1", &[name.into()], &[]).unwrap();
            assert_eq!(
                root.sign_agent(&request(&csr, "web-1"), now).unwrap_err(),
                SignError::Refused(format!(
                    "an agent certificate may not name {name} (the servers' name)"
                ))
            );
        }
        // Too many names, garbage, and oversized input.
        let many: Vec<String> = (0..AGENT_SANS_MAX)
            .map(|i| format!("n{i}.example"))
            .collect();
        let (csr, _) = agent_csr(TRUST_DOMAIN, "dc1", "web-1", &many, &[]).unwrap();
        assert!(matches!(
            root.sign_agent(&request(&csr, "web-1"), now),
            Err(SignError::Refused(why)) if why.starts_with("at most 66")
        ));
        assert!(matches!(
            root.sign_agent(&request("not a request", "web-1"), now),
            Err(SignError::Refused(why)) if why.starts_with("invalid certificate request")
        ));
        let huge = "A".repeat(CSR_PEM_BYTES_MAX + 1);
        assert!(root.sign_agent(&request(&huge, "web-1"), now).is_err());
        // A request whose signature does not match its key.
        let (csr, _) = agent_csr(TRUST_DOMAIN, "dc1", "web-1", &[], &[]).unwrap();
        let mut body =
            rustls::pki_types::CertificateSigningRequestDer::from_pem_slice(csr.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec();
        let last = body.len() - 1;
        body[last] ^= 0xff;
        let tampered = super::super::generate::pem_encode("CERTIFICATE REQUEST", &body);
        assert!(root.sign_agent(&request(&tampered, "web-1"), now).is_err());
    }
}
