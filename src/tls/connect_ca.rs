//! The built-in Connect CA's cryptography (rcgen over ring; no OpenSSL): making a root,
//! cross-signing a new root with the old one's key, signing a service's CSR into a SPIFFE
//! leaf certificate, and making a leaf's key and CSR on the agent that will hold the key.
//! Across datacenters: a secondary's intermediate key and CSR, the primary's signature on
//! it (a CA limited to signing leaves), and the secondary's check of what came back.
//!
//! Not pure: keys, ECDSA signatures and serial numbers draw on the system's randomness. The
//! callers (the leader for roots, any server for leaves, the agent for keys) pass the time
//! and everything else in; nothing here reads the store.
//!
//! Names, as Consul's built-in provider makes them: a root's common name is
//! `pri-<id>.consul.ca.<first 8 of the cluster ID>.consul`; a leaf's common name and DNS SAN
//! are `<service>.svc.default.<first 8 of the cluster ID>.consul` and its URI SAN is the
//! service's SPIFFE ID. Leaves are backdated a minute against clock skew, as Consul does.
//! A secondary's intermediate is named `sec-<id>.consul.ca.<first 8>.consul` and carries
//! the trust domain's signing ID `spiffe://<trust domain>` as its URI SAN.

use crate::proto::spiffe::{self, ServiceId, SpiffeError};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use std::time::Duration;
use time::OffsetDateTime;

/// How far a leaf's validity starts before its signing (Consul's one minute of skew).
pub const LEAF_BACKDATE: Duration = Duration::from_secs(60);
/// Largest CSR accepted, in bytes of PEM.
pub const CSR_PEM_BYTES_MAX: usize = 16 * 1024;

fn algorithm(bits: u32) -> Result<&'static rcgen::SignatureAlgorithm, String> {
    match bits {
        256 => Ok(&rcgen::PKCS_ECDSA_P256_SHA256),
        384 => Ok(&rcgen::PKCS_ECDSA_P384_SHA384),
        other => Err(format!(
            "EC key length {other} is not supported (256 or 384 bits)"
        )),
    }
}

/// The size in bits of an EC key given as PKCS#8 PEM (256 or 384), if it parses.
pub fn key_bits_of(key_pem: &str) -> Option<u32> {
    let key = parse_key(key_pem).ok()?;
    let alg = key.algorithm();
    if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
        Some(256)
    } else if alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
        Some(384)
    } else {
        None
    }
}

/// A fresh EC key of `bits`, as PKCS#8 PEM.
pub fn new_key_pem(bits: u32) -> Result<String, String> {
    let key = KeyPair::generate_for(algorithm(bits)?)
        .map_err(|e| format!("failed to generate private key: {e}"))?;
    Ok(key.serialize_pem())
}

fn parse_key(pem: &str) -> Result<KeyPair, String> {
    KeyPair::from_pem(pem).map_err(|e| format!("failed to parse private key: {e}"))
}

fn at(unix_s: i64) -> Result<OffsetDateTime, String> {
    OffsetDateTime::from_unix_timestamp(unix_s).map_err(|e| format!("time out of range: {e}"))
}

/// Colon-separated lower-case hex, Consul's `connect.HexString`.
pub fn colon_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Consul's root ID: the SHA-1 fingerprint of the certificate, colon-separated hex.
pub fn fingerprint(der: &[u8]) -> String {
    colon_hex(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, der).as_ref())
}

fn random_serial() -> (SerialNumber, Vec<u8>) {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    if bytes[0] == 0 {
        bytes[0] = 0x01;
    }
    (SerialNumber::from_slice(&bytes), bytes.to_vec())
}

/// The first eight characters of the cluster ID, as Consul's certificate names use it.
fn cluster_short(cluster_id: &str) -> &str {
    cluster_id.get(..8).unwrap_or(cluster_id)
}

/// What a root is made of.
#[derive(Clone, Debug)]
pub struct RootSpec {
    pub cluster_id: String,
    pub key_bits: u32,
    pub ttl: Duration,
    pub now_unix_s: i64,
}

/// A new root: its certificate, key and the facts Consul reports about it.
#[derive(Clone, Debug)]
pub struct MadeRoot {
    pub id: String,
    pub name: String,
    pub serial_number: u64,
    pub signing_key_id: String,
    pub not_before_unix_s: i64,
    pub not_after_unix_s: i64,
    pub cert_pem: String,
    pub key_pem: String,
    pub key_bits: u32,
}

fn root_params(
    common_name: &str,
    not_before: i64,
    not_after: i64,
    serial: SerialNumber,
) -> Result<CertificateParams, String> {
    let mut params = CertificateParams::default();
    params.serial_number = Some(serial);
    params.not_before = at(not_before)?;
    params.not_after = at(not_after)?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// The subject key identifier of a certificate (DER), colon-separated hex.
fn subject_key_id(der: &[u8]) -> String {
    use x509_parser::prelude::{FromDer, ParsedExtension, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return String::new();
    };
    for ext in cert.extensions() {
        if let ParsedExtension::SubjectKeyIdentifier(id) = ext.parsed_extension() {
            return colon_hex(id.0);
        }
    }
    String::new()
}

/// Makes a self-signed root.
pub fn make_root(spec: &RootSpec) -> Result<MadeRoot, String> {
    let key = KeyPair::generate_for(algorithm(spec.key_bits)?)
        .map_err(|e| format!("failed to generate private key: {e}"))?;
    let (serial, serial_bytes) = random_serial();
    let short: [u8; 4] = rand::random();
    let common_name = format!(
        "pri-{}.consul.ca.{}.consul",
        colon_hex(&short).replace(':', ""),
        cluster_short(&spec.cluster_id)
    );
    let not_before = spec.now_unix_s - LEAF_BACKDATE.as_secs() as i64;
    let not_after = spec.now_unix_s + spec.ttl.as_secs() as i64;
    let params = root_params(&common_name, not_before, not_after, serial)?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("error generating CA root certificate: {e}"))?;
    let mut low = [0u8; 8];
    low.copy_from_slice(&serial_bytes[8..]);
    Ok(MadeRoot {
        id: fingerprint(cert.der()),
        name: "Consul CA Primary Cert".to_string(),
        serial_number: u64::from_be_bytes(low),
        signing_key_id: subject_key_id(cert.der()),
        not_before_unix_s: not_before,
        not_after_unix_s: not_after,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        key_bits: spec.key_bits,
    })
}

/// The new root's subject and key certified by the old root's key: what peers that trust
/// only the old root need to verify leaves of the new one.
pub fn cross_sign(new: &MadeRoot, old_cert_pem: &str, old_key_pem: &str) -> Result<String, String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let new_key = parse_key(&new.key_pem)?;
    let der = rustls_pemfile_der(&new.cert_pem)?;
    let (_, parsed) = X509Certificate::from_der(&der)
        .map_err(|e| format!("failed to parse the new root: {e}"))?;
    let common_name = parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let (serial, _) = random_serial();
    let params = root_params(
        &common_name,
        new.not_before_unix_s,
        new.not_after_unix_s,
        serial,
    )?;
    let old_key = parse_key(old_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(old_cert_pem, old_key)
        .map_err(|e| format!("failed to parse the old root: {e}"))?;
    let cert = params
        .signed_by(&new_key, &issuer)
        .map_err(|e| format!("error cross-signing the new root: {e}"))?;
    Ok(cert.pem())
}

fn rustls_pemfile_der(pem: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .map(|c| c.as_ref().to_vec())
        .map_err(|e| format!("failed to parse certificate PEM: {e}"))
}

/// A leaf's key and CSR, made on the agent that keeps the key.
/// `dns_sans` are extra DNS names the leaf is asked for (an ingress gateway's hosts, as
/// Consul's leaf request carries them); the signer copies them into the leaf.
pub fn make_leaf_csr(
    id: &ServiceId,
    cluster_id_hint: &str,
    key_bits: u32,
    dns_sans: &[String],
) -> Result<(String, String), String> {
    let key = KeyPair::generate_for(algorithm(key_bits)?)
        .map_err(|e| format!("failed to generate private key: {e}"))?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        leaf_common_name(&id.service, cluster_id_hint),
    );
    params.distinguished_name = name;
    let uri = id
        .uri()
        .try_into()
        .map_err(|_| format!("{:?} is not a valid URI SAN", id.uri()))?;
    params.subject_alt_names.push(SanType::URI(uri));
    for name in dns_sans {
        params.subject_alt_names.push(SanType::DnsName(
            name.clone()
                .try_into()
                .map_err(|_| format!("{name:?} is not a valid DNS SAN"))?,
        ));
    }
    let csr = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| format!("failed to create the CSR: {e}"))?;
    Ok((csr, key.serialize_pem()))
}

/// `<service>.svc.default.<first 8 of the cluster ID>.consul`, Consul's leaf common name.
pub fn leaf_common_name(service: &str, cluster_or_trust_domain: &str) -> String {
    let cluster = cluster_or_trust_domain.trim_end_matches(".consul");
    let dns_safe: String = service
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    format!("{dns_safe}.svc.default.{}.consul", cluster_short(cluster))
}

/// What signing a CSR needs.
pub struct LeafSpec<'a> {
    pub csr_pem: &'a str,
    pub ca_cert_pem: &'a str,
    pub ca_key_pem: &'a str,
    pub trust_domain: &'a str,
    pub datacenter: &'a str,
    pub ttl: Duration,
    pub now_unix_s: i64,
}

/// A signed leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedLeaf {
    pub cert_pem: String,
    /// Colon-separated hex, as Consul reports serial numbers.
    pub serial_number: String,
    pub service: String,
    pub service_uri: String,
    pub valid_after_unix_s: i64,
    pub valid_before_unix_s: i64,
}

/// Signs a service's CSR: its one URI SAN must be a service SPIFFE ID of this trust domain
/// and datacenter. The caller checked the requester may write that service.
pub fn sign_leaf(spec: &LeafSpec) -> Result<SignedLeaf, String> {
    if spec.csr_pem.len() > CSR_PEM_BYTES_MAX {
        return Err(format!("CSR exceeds {CSR_PEM_BYTES_MAX} bytes"));
    }
    let csr = CertificateSigningRequestParams::from_pem(spec.csr_pem)
        .map_err(|e| format!("failed to parse CSR: {e}"))?;
    // The CSR's DNS names are signed as asked, as Consul's CA copies them: the requester
    // holds `service:write` on the service, which is what a gateway's hosts need.
    let (mut uris, mut dns_sans): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for san in &csr.params.subject_alt_names {
        match san {
            SanType::URI(uri) => uris.push(uri.as_str().to_string()),
            SanType::DnsName(name) => dns_sans.push(name.as_str().to_string()),
            _ => {}
        }
    }
    let [uri] = &uris[..] else {
        return Err("CSR SAN contains an invalid SPIFFE ID".to_string());
    };
    let id = spiffe::parse_service(uri).map_err(|e| match e {
        SpiffeError::NotSpiffe => "CSR SAN contains an invalid SPIFFE ID".to_string(),
        SpiffeError::NotService => "SPIFFE ID in CSR must be a service or agent ID".to_string(),
    })?;
    if !id.trust_domain.eq_ignore_ascii_case(spec.trust_domain) {
        return Err(format!(
            "SPIFFE ID in CSR from a different trust domain: {}, we are {}",
            id.trust_domain, spec.trust_domain
        ));
    }
    if id.datacenter != spec.datacenter {
        return Err(format!(
            "SPIFFE ID in CSR from a different datacenter: {}, we are {}",
            id.datacenter, spec.datacenter
        ));
    }
    let ca_key = parse_key(spec.ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(spec.ca_cert_pem, ca_key)
        .map_err(|e| format!("failed to parse the CA root: {e}"))?;
    let (serial, serial_bytes) = random_serial();
    let valid_after = spec.now_unix_s - LEAF_BACKDATE.as_secs() as i64;
    let valid_before = spec.now_unix_s + spec.ttl.as_secs() as i64;
    let mut params = CertificateParams::default();
    params.serial_number = Some(serial);
    params.not_before = at(valid_after)?;
    params.not_after = at(valid_before)?;
    let common_name = leaf_common_name(&id.service, spec.trust_domain);
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name.clone());
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyAgreement,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.subject_alt_names.push(SanType::URI(
        uri.clone()
            .try_into()
            .map_err(|_| "invalid URI SAN".to_string())?,
    ));
    params.subject_alt_names.push(SanType::DnsName(
        common_name
            .clone()
            .try_into()
            .map_err(|_| "invalid DNS SAN".to_string())?,
    ));
    for name in dns_sans.into_iter().filter(|n| *n != common_name) {
        params.subject_alt_names.push(SanType::DnsName(
            name.try_into().map_err(|_| "invalid DNS SAN".to_string())?,
        ));
    }
    let cert = params
        .signed_by(&csr.public_key, &issuer)
        .map_err(|e| format!("error signing the leaf certificate: {e}"))?;
    Ok(SignedLeaf {
        cert_pem: cert.pem(),
        serial_number: colon_hex(&serial_bytes),
        service: id.service.clone(),
        service_uri: uri.clone(),
        valid_after_unix_s: valid_after,
        valid_before_unix_s: valid_before,
    })
}

/// A certificate and its key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub valid_before_unix_s: i64,
}

/// The certificate a server presents on its peering endpoint (Consul's server certificate
/// from the Connect CA): one DNS SAN, `server_name` (`server.<dc>.peering.<trust domain>`,
/// the name a peering token tells the other cluster to expect), server authentication
/// only, signed by the active root whose certificate and key are given. The other cluster
/// verifies it against the roots the token carried.
pub fn sign_peering_server(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    server_name: &str,
    ttl: Duration,
    now_unix_s: i64,
) -> Result<ServerCert, String> {
    let ca_key = parse_key(ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)
        .map_err(|e| format!("failed to parse the CA root: {e}"))?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| format!("failed to generate private key: {e}"))?;
    let (serial, _) = random_serial();
    let valid_before = now_unix_s + ttl.as_secs() as i64;
    let mut params = CertificateParams::default();
    params.serial_number = Some(serial);
    params.not_before = at(now_unix_s - LEAF_BACKDATE.as_secs() as i64)?;
    params.not_after = at(valid_before)?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, server_name.to_string());
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.subject_alt_names.push(SanType::DnsName(
        server_name
            .to_string()
            .try_into()
            .map_err(|_| format!("invalid server name {server_name:?}"))?,
    ));
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("error signing the peering server certificate: {e}"))?;
    Ok(ServerCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        valid_before_unix_s: valid_before,
    })
}

/// The signing ID of a trust domain, `spiffe://<trust domain>`: the one URI SAN of a CA
/// certificate of that domain (Consul's `SpiffeIDSigning`).
pub fn signing_uri(trust_domain: &str) -> String {
    format!("spiffe://{}", trust_domain.to_ascii_lowercase())
}

/// A secondary datacenter's intermediate CA key and the CSR its leader sends the primary:
/// common name `sec-<id>.consul.ca.<first 8 of the cluster ID>.consul` (the `sec-` form of
/// the primary's root name, as Consul's provider names it) and the trust domain's signing
/// ID as its one URI SAN. Returns `(csr_pem, key_pem)`.
pub fn make_intermediate_csr(
    trust_domain: &str,
    key_bits: u32,
) -> Result<(String, String), String> {
    let key = KeyPair::generate_for(algorithm(key_bits)?)
        .map_err(|e| format!("failed to generate private key: {e}"))?;
    let short: [u8; 4] = rand::random();
    let cluster = trust_domain.trim_end_matches(".consul");
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        format!(
            "sec-{}.consul.ca.{}.consul",
            colon_hex(&short).replace(':', ""),
            cluster_short(cluster)
        ),
    );
    params.distinguished_name = name;
    let uri = signing_uri(trust_domain)
        .try_into()
        .map_err(|_| format!("{trust_domain:?} makes no valid URI SAN"))?;
    params.subject_alt_names.push(SanType::URI(uri));
    let csr = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| format!("failed to create the CSR: {e}"))?;
    Ok((csr, key.serialize_pem()))
}

/// What signing a secondary datacenter's intermediate needs.
pub struct IntermediateSpec<'a> {
    pub csr_pem: &'a str,
    pub ca_cert_pem: &'a str,
    pub ca_key_pem: &'a str,
    pub trust_domain: &'a str,
    pub ttl: Duration,
    pub now_unix_s: i64,
}

/// Signs a secondary datacenter's intermediate CSR with the primary's active root
/// (Consul's `ConnectCA.SignIntermediate`): a URI SAN, if the CSR has one, must be this
/// trust domain's signing ID; the certificate is a CA that may sign leaves only (path
/// length 0), valid from a minute ago for `ttl`.
pub fn sign_intermediate(spec: &IntermediateSpec) -> Result<String, String> {
    if spec.csr_pem.len() > CSR_PEM_BYTES_MAX {
        return Err(format!("CSR exceeds {CSR_PEM_BYTES_MAX} bytes"));
    }
    let csr = CertificateSigningRequestParams::from_pem(spec.csr_pem)
        .map_err(|e| format!("failed to parse CSR: {e}"))?;
    let uris: Vec<&str> = csr
        .params
        .subject_alt_names
        .iter()
        .filter_map(|san| match san {
            SanType::URI(uri) => Some(uri.as_str()),
            _ => None,
        })
        .collect();
    let ours = signing_uri(spec.trust_domain);
    match &uris[..] {
        [] => {}
        [uri] if uri.eq_ignore_ascii_case(&ours) => {}
        [uri] => {
            return Err(format!(
                "incoming CSR domain {uri:?} is not valid for our domain {ours:?}"
            ))
        }
        more => {
            return Err(format!(
                "incoming CSR has unexpected number of URIs: {}",
                more.len()
            ))
        }
    }
    let ca_key = parse_key(spec.ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(spec.ca_cert_pem, ca_key)
        .map_err(|e| format!("failed to parse the CA root: {e}"))?;
    let (serial, _) = random_serial();
    let mut params = csr.params.clone();
    params.serial_number = Some(serial);
    params.not_before = at(spec.now_unix_s - LEAF_BACKDATE.as_secs() as i64)?;
    params.not_after = at(spec.now_unix_s + spec.ttl.as_secs() as i64)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.extended_key_usages = Vec::new();
    params.use_authority_key_identifier_extension = true;
    let cert = params
        .signed_by(&csr.public_key, &issuer)
        .map_err(|e| format!("error generating certificate: {e}"))?;
    Ok(cert.pem())
}

/// What a secondary checks of the intermediate the primary signed before it uses it
/// (Consul's `validateSetIntermediate`): it is for `key_pem`, it is a CA, its one URI SAN
/// is the trust domain's signing ID, and `root_pem`'s key signed it. Returns the facts the
/// roots list reports about it.
pub fn check_intermediate(
    intermediate_pem: &str,
    key_pem: &str,
    root_pem: &str,
    trust_domain: &str,
) -> Result<IntermediateFacts, String> {
    use rcgen::PublicKeyData;
    use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};
    let der = rustls_pemfile_der(intermediate_pem)
        .map_err(|e| format!("error parsing intermediate PEM: {e}"))?;
    let (_, cert) = X509Certificate::from_der(&der)
        .map_err(|e| format!("error parsing intermediate PEM: {e}"))?;
    let key = parse_key(key_pem)?;
    if cert.public_key().raw != key.subject_public_key_info().as_slice() {
        return Err("intermediate cert is for a different private key".to_string());
    }
    if !cert.is_ca() {
        return Err("intermediate is not a CA certificate".to_string());
    }
    let mut uris = Vec::new();
    for ext in cert.extensions() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
            for name in &san.general_names {
                if let GeneralName::URI(uri) = name {
                    uris.push(uri.to_string());
                }
            }
        }
    }
    let want = signing_uri(trust_domain);
    match &uris[..] {
        [uri] if uri.eq_ignore_ascii_case(&want) => {}
        [uri] => {
            return Err(format!(
                "incoming cert URI {uri:?} does not match current URI: {want:?}"
            ))
        }
        more => {
            return Err(format!(
                "incoming intermediate cert has unexpected number of URIs: {}",
                more.len()
            ))
        }
    }
    let root_der = rustls_pemfile_der(root_pem)?;
    let (_, root) =
        X509Certificate::from_der(&root_der).map_err(|e| format!("error parsing the root: {e}"))?;
    if cert.issuer() != root.subject() || cert.verify_signature(Some(root.public_key())).is_err() {
        return Err("could not verify intermediate cert against root".to_string());
    }
    Ok(IntermediateFacts {
        signing_key_id: subject_key_id(&der),
        not_before_unix_s: cert.validity().not_before.timestamp(),
        not_after_unix_s: cert.validity().not_after.timestamp(),
    })
}

/// What the roots list and the renewal schedule need of an intermediate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntermediateFacts {
    /// Its subject key ID, colon-separated hex: the `SigningKeyID` of the root it hangs from.
    pub signing_key_id: String,
    pub not_before_unix_s: i64,
    pub not_after_unix_s: i64,
}

/// The validity of a certificate (PEM): `(not_before, not_after)` in Unix seconds.
pub fn validity_of(pem: &str) -> Result<(i64, i64), String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let der = rustls_pemfile_der(pem)?;
    let (_, cert) =
        X509Certificate::from_der(&der).map_err(|e| format!("failed to parse certificate: {e}"))?;
    Ok((
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    ))
}

/// The URI SAN (a service SPIFFE ID) of a certificate given as DER, for a proxy checking
/// its peer.
pub fn service_id_of(der: &[u8]) -> Option<ServiceId> {
    use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    for ext in cert.extensions() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
            for name in &san.general_names {
                if let GeneralName::URI(uri) = name {
                    if let Ok(id) = spiffe::parse_service(uri) {
                        return Some(id);
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = "0f8c3d4e-1111-2222-3333-444444444444";
    const NOW: i64 = 1_700_000_000;

    fn root(bits: u32) -> MadeRoot {
        make_root(&RootSpec {
            cluster_id: CLUSTER.into(),
            key_bits: bits,
            ttl: Duration::from_secs(10 * 365 * 86400),
            now_unix_s: NOW,
        })
        .unwrap()
    }

    fn leaf(
        root: &MadeRoot,
        service: &str,
        trust_domain: &str,
        dc: &str,
    ) -> Result<SignedLeaf, String> {
        let id = ServiceId::new(trust_domain, dc, service);
        let (csr, _key) = make_leaf_csr(&id, CLUSTER, 256, &[]).unwrap();
        sign_leaf(&LeafSpec {
            csr_pem: &csr,
            ca_cert_pem: &root.cert_pem,
            ca_key_pem: &root.key_pem,
            trust_domain: &format!("{CLUSTER}.consul"),
            datacenter: "dc1",
            ttl: Duration::from_secs(72 * 3600),
            now_unix_s: NOW,
        })
    }

    #[test]
    fn a_leaf_carries_the_dns_names_its_csr_asks_for() {
        let root = root(256);
        let trust_domain = format!("{CLUSTER}.consul");
        let id = ServiceId::new(&trust_domain, "dc1", "ingress");
        let names = [
            "*.ingress.consul".to_string(),
            "api.example.com".to_string(),
        ];
        let (csr, _key) = make_leaf_csr(&id, CLUSTER, 256, &names).unwrap();
        let signed = sign_leaf(&LeafSpec {
            csr_pem: &csr,
            ca_cert_pem: &root.cert_pem,
            ca_key_pem: &root.key_pem,
            trust_domain: &trust_domain,
            datacenter: "dc1",
            ttl: Duration::from_secs(3600),
            now_unix_s: NOW,
        })
        .unwrap();
        use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};
        let der = rustls_pemfile_der(&signed.cert_pem).unwrap();
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let mut dns: Vec<String> = Vec::new();
        for ext in cert.extensions() {
            if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
                for name in &san.general_names {
                    if let GeneralName::DNSName(n) = name {
                        dns.push(n.to_string());
                    }
                }
            }
        }
        // Consul's own name first, then the asked ones.
        assert_eq!(
            dns,
            vec![
                leaf_common_name("ingress", &trust_domain),
                names[0].clone(),
                names[1].clone()
            ]
        );
        assert_eq!(service_id_of(&der).unwrap().service, "ingress");
    }

    #[test]
    fn roots_sign_spiffe_leaves_of_their_trust_domain_only() {
        let root = root(256);
        assert_eq!(root.id.len(), 20 * 3 - 1);
        assert!(!root.signing_key_id.is_empty());
        let trust_domain = format!("{CLUSTER}.consul");
        let signed = leaf(&root, "web", &trust_domain, "dc1").unwrap();
        assert_eq!(signed.service, "web");
        assert_eq!(
            signed.service_uri,
            format!("spiffe://{trust_domain}/ns/default/dc/dc1/svc/web")
        );
        assert_eq!(signed.valid_before_unix_s - NOW, 72 * 3600);
        let der = rustls_pemfile_der(&signed.cert_pem).unwrap();
        assert_eq!(service_id_of(&der).unwrap().service, "web");
        assert!(leaf(&root, "web", "other.consul", "dc1")
            .unwrap_err()
            .contains("different trust domain"));
        assert!(leaf(&root, "web", &trust_domain, "dc2")
            .unwrap_err()
            .contains("different datacenter"));
        assert!(sign_leaf(&LeafSpec {
            csr_pem: "nope",
            ca_cert_pem: &root.cert_pem,
            ca_key_pem: &root.key_pem,
            trust_domain: &trust_domain,
            datacenter: "dc1",
            ttl: Duration::from_secs(3600),
            now_unix_s: NOW,
        })
        .is_err());
    }

    #[test]
    fn a_secondary_intermediate_is_signed_by_the_primary_root_and_signs_leaves() {
        let primary = root(256);
        let trust_domain = format!("{CLUSTER}.consul");
        let (csr, key) = make_intermediate_csr(&trust_domain, 256).unwrap();
        let signed = sign_intermediate(&IntermediateSpec {
            csr_pem: &csr,
            ca_cert_pem: &primary.cert_pem,
            ca_key_pem: &primary.key_pem,
            trust_domain: &trust_domain,
            ttl: Duration::from_secs(8760 * 3600),
            now_unix_s: NOW,
        })
        .unwrap();
        let facts = check_intermediate(&signed, &key, &primary.cert_pem, &trust_domain).unwrap();
        assert_eq!(facts.not_after_unix_s - NOW, 8760 * 3600);
        assert_eq!(facts.not_before_unix_s, NOW - 60);
        assert!(!facts.signing_key_id.is_empty());
        assert_eq!(key_bits_of(&key), Some(256));
        assert_eq!(key_bits_of("nope"), None);
        assert_eq!(validity_of(&signed).unwrap().1, facts.not_after_unix_s);
        // Another key, another root or another trust domain is refused.
        let other = root(256);
        let (_, other_key) = make_intermediate_csr(&trust_domain, 256).unwrap();
        assert!(
            check_intermediate(&signed, &other_key, &primary.cert_pem, &trust_domain)
                .unwrap_err()
                .contains("different private key")
        );
        assert!(
            check_intermediate(&signed, &key, &other.cert_pem, &trust_domain)
                .unwrap_err()
                .contains("could not verify")
        );
        assert!(
            check_intermediate(&signed, &key, &primary.cert_pem, "other.consul")
                .unwrap_err()
                .contains("does not match")
        );
        let (foreign_csr, _) = make_intermediate_csr("other.consul", 256).unwrap();
        assert!(sign_intermediate(&IntermediateSpec {
            csr_pem: &foreign_csr,
            ca_cert_pem: &primary.cert_pem,
            ca_key_pem: &primary.key_pem,
            trust_domain: &trust_domain,
            ttl: Duration::from_secs(3600),
            now_unix_s: NOW,
        })
        .unwrap_err()
        .contains("is not valid for our domain"));
        // The intermediate signs a leaf of dc2 whose chain ends at the primary's root.
        let id = ServiceId::new(&trust_domain, "dc2", "db");
        let (leaf_csr, _) = make_leaf_csr(&id, CLUSTER, 256, &[]).unwrap();
        let leaf = sign_leaf(&LeafSpec {
            csr_pem: &leaf_csr,
            ca_cert_pem: &signed,
            ca_key_pem: &key,
            trust_domain: &trust_domain,
            datacenter: "dc2",
            ttl: Duration::from_secs(3600),
            now_unix_s: NOW,
        })
        .unwrap();
        use x509_parser::prelude::{FromDer, X509Certificate};
        let leaf_der = rustls_pemfile_der(&leaf.cert_pem).unwrap();
        let (_, leaf_cert) = X509Certificate::from_der(&leaf_der).unwrap();
        let inter_der = rustls_pemfile_der(&signed).unwrap();
        let (_, inter_cert) = X509Certificate::from_der(&inter_der).unwrap();
        assert_eq!(leaf_cert.issuer(), inter_cert.subject());
        assert!(leaf_cert
            .verify_signature(Some(inter_cert.public_key()))
            .is_ok());
        let constraints = inter_cert.basic_constraints().unwrap().unwrap().value;
        assert!(constraints.ca);
        assert_eq!(constraints.path_len_constraint, Some(0));
    }

    #[test]
    fn a_new_root_is_cross_signed_by_the_old_key_and_p384_works() {
        let old = root(256);
        let new = root(384);
        let cross = cross_sign(&new, &old.cert_pem, &old.key_pem).unwrap();
        use x509_parser::prelude::{FromDer, X509Certificate};
        let der = rustls_pemfile_der(&cross).unwrap();
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let old_der = rustls_pemfile_der(&old.cert_pem).unwrap();
        let (_, old_cert) = X509Certificate::from_der(&old_der).unwrap();
        let new_der = rustls_pemfile_der(&new.cert_pem).unwrap();
        let (_, new_cert) = X509Certificate::from_der(&new_der).unwrap();
        assert_eq!(cert.issuer(), old_cert.subject());
        assert_eq!(cert.subject(), new_cert.subject());
        assert_eq!(cert.public_key().raw, new_cert.public_key().raw);
        assert!(cert.verify_signature(Some(old_cert.public_key())).is_ok());
        assert_eq!(subject_key_id(&der), new.signing_key_id);
        assert!(make_root(&RootSpec {
            cluster_id: CLUSTER.into(),
            key_bits: 521,
            ttl: Duration::from_secs(1),
            now_unix_s: NOW
        })
        .is_err());
    }
}
