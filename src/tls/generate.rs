//! Creating the agent CA and agent certificates the way `consul tls ca create` and
//! `consul tls cert create` do: EC P-256 keys, a CA valid for 5 years by default, leaf
//! certificates valid for 1 year, and Consul's names:
//!
//! | kind     | common name                  | DNS names                                             | IPs       | extended key usage |
//! |----------|------------------------------|-------------------------------------------------------|-----------|--------------------|
//! | `server` | `server.<dc>.<domain>`       | extra names, `<node>.server.<dc>.<domain>`, `server.<dc>.<domain>`, `localhost` | extra, 127.0.0.1 | server + client |
//! | `client` | `client.<dc>.<domain>`       | extra names, `client.<dc>.<domain>`, `localhost`      | extra, 127.0.0.1 | client + server |
//! | `cli`    | `cli.<dc>.<domain>`          | `cli.<dc>.<domain>`, `localhost`                      | none      | none               |
//!
//! Keys are written as PKCS#8 (`PRIVATE KEY`); a CA key Consul wrote as SEC1 (`EC PRIVATE
//! KEY`) is read too. Not pure: keys and serial numbers come from the system's randomness.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SanType, SerialNumber,
};
use std::net::{IpAddr, Ipv4Addr};
use time::{Duration, OffsetDateTime};

/// Consul's default CA lifetime: 1825 days.
pub const CA_DAYS_DEFAULT: u32 = 1825;
/// Consul's default certificate lifetime: 365 days.
pub const CERT_DAYS_DEFAULT: u32 = 365;
/// Longest lifetime accepted: 100 years.
pub const DAYS_MAX: u32 = 36_500;
/// Most extra names or addresses one certificate may carry.
pub const EXTRA_NAMES_MAX: usize = 256;

/// `tls ca create` options.
#[derive(Clone, Debug)]
pub struct CaOptions {
    pub days: u32,
    /// The cluster's DNS domain (`consul`); with `name_constraint` the CA only signs names in
    /// it, `localhost` and `additional_name_constraints`.
    pub domain: String,
    pub name_constraint: bool,
    pub additional_name_constraints: Vec<String>,
    /// Defaults to `Consul Agent CA <serial>`.
    pub common_name: Option<String>,
}

/// Which kind of agent certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertKind {
    Server,
    Client,
    Cli,
}

impl CertKind {
    pub fn name(self) -> &'static str {
        match self {
            CertKind::Server => "server",
            CertKind::Client => "client",
            CertKind::Cli => "cli",
        }
    }
}

/// `tls cert create` options.
#[derive(Clone, Debug)]
pub struct CertOptions {
    pub kind: CertKind,
    pub datacenter: String,
    pub domain: String,
    /// Servers only: adds `<node>.server.<dc>.<domain>`.
    pub node: Option<String>,
    pub additional_dns_names: Vec<String>,
    pub additional_ip_addresses: Vec<IpAddr>,
    pub days: u32,
    /// Start of validity; `None` is now. (Tests set it in the past to make expired ones.)
    pub not_before: Option<OffsetDateTime>,
}

/// The names a certificate of `options` carries: common name, DNS names, IP addresses, in
/// Consul's order.
pub fn certificate_names(options: &CertOptions) -> (String, Vec<String>, Vec<IpAddr>) {
    let base = format!(
        "{}.{}.{}",
        options.kind.name(),
        options.datacenter,
        options.domain
    );
    let mut dns: Vec<String> = options
        .additional_dns_names
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    let mut ips = options.additional_ip_addresses.clone();
    match options.kind {
        CertKind::Server => {
            if let Some(node) = options.node.as_deref().filter(|n| !n.is_empty()) {
                dns.push(format!("{node}.{base}"));
            }
            dns.push(base.clone());
            dns.push("localhost".to_string());
            ips.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        CertKind::Client => {
            dns.push(base.clone());
            dns.push("localhost".to_string());
            ips.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        CertKind::Cli => {
            // Consul's CLI certificates carry only their own name and localhost.
            dns = vec![base.clone(), "localhost".to_string()];
            ips.clear();
        }
    }
    (base, dns, ips)
}

/// A random positive 128-bit serial number and its decimal text.
pub(crate) fn random_serial() -> (SerialNumber, String) {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    if bytes[0] == 0 {
        // Keep the encoding minimal-length and the value positive.
        bytes[0] = 0x01;
    }
    let decimal = u128::from_be_bytes(bytes).to_string();
    (SerialNumber::from_slice(&bytes), decimal)
}

fn validity(
    days: u32,
    not_before: Option<OffsetDateTime>,
) -> Result<(OffsetDateTime, OffsetDateTime), String> {
    if days == 0 || days > DAYS_MAX {
        return Err(format!(
            "-days must be between 1 and {DAYS_MAX}, got {days}"
        ));
    }
    let start = not_before.unwrap_or_else(OffsetDateTime::now_utc);
    Ok((start, start + Duration::days(i64::from(days))))
}

/// A fresh EC P-256 key, the only kind praetor makes.
pub(crate) fn new_key() -> Result<KeyPair, String> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| format!("failed to generate private key: {e}"))
}

/// A root CA's parameters: self-signed, unconstrained path length, certificate and CRL
/// signing, with the key identifiers that let a chain be built from it.
pub(crate) fn ca_params(
    serial: SerialNumber,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    common_name: String,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.serial_number = Some(serial);
    params.not_before = not_before;
    params.not_after = not_after;
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
    params
}

impl Default for CaOptions {
    /// `tls ca create` without flags: 5 years, domain `consul`, no name constraint.
    fn default() -> CaOptions {
        CaOptions {
            days: CA_DAYS_DEFAULT,
            domain: "consul".to_string(),
            name_constraint: false,
            additional_name_constraints: Vec::new(),
            common_name: None,
        }
    }
}

/// Creates a CA: (certificate PEM, private key PEM).
pub fn generate_ca(options: &CaOptions) -> Result<(String, String), String> {
    let (not_before, not_after) = validity(options.days, None)?;
    let key = new_key()?;
    let (serial, serial_text) = random_serial();
    let common_name = options
        .common_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("Consul Agent CA {serial_text}"));
    let mut params = ca_params(serial, not_before, not_after, common_name);
    if options.name_constraint {
        if options.additional_name_constraints.len() > EXTRA_NAMES_MAX {
            return Err(format!("at most {EXTRA_NAMES_MAX} name constraints"));
        }
        let mut permitted: Vec<GeneralSubtree> = options
            .additional_name_constraints
            .iter()
            .map(|d| GeneralSubtree::DnsName(d.clone()))
            .collect();
        permitted.push(GeneralSubtree::DnsName(options.domain.clone()));
        permitted.push(GeneralSubtree::DnsName("localhost".to_string()));
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: permitted,
            excluded_subtrees: Vec::new(),
        });
    }
    let certificate = params
        .self_signed(&key)
        .map_err(|e| format!("error generating CA certificate: {e}"))?;
    Ok((certificate.pem(), key.serialize_pem()))
}

/// Creates a certificate of `options` signed by the CA: (certificate PEM, private key PEM).
pub fn generate_cert(
    ca_pem: &str,
    ca_key_pem: &str,
    options: &CertOptions,
) -> Result<(String, String), String> {
    if options.additional_dns_names.len() + options.additional_ip_addresses.len() > EXTRA_NAMES_MAX
    {
        return Err(format!(
            "at most {EXTRA_NAMES_MAX} additional names and addresses"
        ));
    }
    let (not_before, not_after) = validity(options.days, options.not_before)?;
    let ca_key = parse_signing_key(ca_key_pem)?;
    let issuer =
        Issuer::from_ca_cert_pem(ca_pem, ca_key).map_err(|e| format!("failed to parse CA: {e}"))?;
    let (common_name, dns, ips) = certificate_names(options);
    let key = new_key()?;
    let (serial, _) = random_serial();
    let mut params = CertificateParams::default();
    params.serial_number = Some(serial);
    params.not_before = not_before;
    params.not_after = not_after;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = match options.kind {
        CertKind::Server => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
        CertKind::Client => vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ],
        CertKind::Cli => Vec::new(),
    };
    params.use_authority_key_identifier_extension = true;
    for dns_name in &dns {
        let ia5 = dns_name
            .clone()
            .try_into()
            .map_err(|_| format!("{dns_name:?} is not a valid DNS name"))?;
        params.subject_alt_names.push(SanType::DnsName(ia5));
    }
    params
        .subject_alt_names
        .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    let certificate = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("failed to create certificate: {e}"))?;
    Ok((certificate.pem(), key.serialize_pem()))
}

/// A CA key from PEM: PKCS#8, or the SEC1 (`EC PRIVATE KEY`) form Consul writes.
pub fn parse_signing_key(pem: &str) -> Result<KeyPair, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let key = PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| format!("failed to parse CA key: {e}"))?;
    let pkcs8 = match &key {
        PrivateKeyDer::Pkcs8(pkcs8) => pkcs8.secret_pkcs8_der().to_vec(),
        PrivateKeyDer::Sec1(sec1) => p256_sec1_to_pkcs8(sec1.secret_sec1_der()),
        _ => return Err("failed to parse CA key: only EC P-256 keys are supported".to_string()),
    };
    KeyPair::try_from(pkcs8.as_slice())
        .map_err(|e| format!("failed to parse CA key (EC P-256 expected): {e}"))
}

/// Wraps a SEC1 `ECPrivateKey` in a PKCS#8 `PrivateKeyInfo` for P-256.
fn p256_sec1_to_pkcs8(sec1: &[u8]) -> Vec<u8> {
    // AlgorithmIdentifier { id-ecPublicKey, prime256v1 }.
    const ALGORITHM: [u8; 21] = [
        0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
        0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
    ];
    let mut body = vec![0x02, 0x01, 0x00];
    body.extend_from_slice(&ALGORITHM);
    body.push(0x04);
    der_length(&mut body, sec1.len());
    body.extend_from_slice(sec1);
    let mut out = vec![0x30];
    der_length(&mut out, body.len());
    out.extend_from_slice(&body);
    out
}

fn der_length(out: &mut Vec<u8>, length: usize) {
    assert!(length < 1 << 16, "keys are far smaller");
    if length < 0x80 {
        out.push(length as u8);
    } else if length < 0x100 {
        out.extend_from_slice(&[0x81, length as u8]);
    } else {
        out.extend_from_slice(&[0x82, (length >> 8) as u8, length as u8]);
    }
}

/// DER bytes as PEM text under `label` (`CERTIFICATE`, …), 64 characters a line.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(kind: CertKind) -> CertOptions {
        CertOptions {
            kind,
            datacenter: "dc1".into(),
            domain: "consul".into(),
            node: None,
            additional_dns_names: vec!["extra.example".into(), " ".into()],
            additional_ip_addresses: vec!["10.0.0.5".parse().unwrap()],
            days: CERT_DAYS_DEFAULT,
            not_before: None,
        }
    }

    #[test]
    fn names_follow_consul() {
        let mut server = options(CertKind::Server);
        server.node = Some("n1".into());
        let (cn, dns, ips) = certificate_names(&server);
        assert_eq!(cn, "server.dc1.consul");
        assert_eq!(
            dns,
            vec![
                "extra.example",
                "n1.server.dc1.consul",
                "server.dc1.consul",
                "localhost"
            ]
        );
        assert_eq!(
            ips,
            vec![
                "10.0.0.5".parse::<IpAddr>().unwrap(),
                "127.0.0.1".parse().unwrap()
            ]
        );
        let (cn, dns, ips) = certificate_names(&options(CertKind::Client));
        assert_eq!(cn, "client.dc1.consul");
        assert_eq!(dns, vec!["extra.example", "client.dc1.consul", "localhost"]);
        assert_eq!(ips.len(), 2);
        let (cn, dns, ips) = certificate_names(&options(CertKind::Cli));
        assert_eq!(
            (cn.as_str(), dns.len(), ips.len()),
            ("cli.dc1.consul", 2, 0)
        );
    }

    #[test]
    fn certificates_chain_to_their_ca_and_sec1_keys_sign() {
        let (ca, ca_key) = generate_ca(&CaOptions {
            days: CA_DAYS_DEFAULT,
            domain: "consul".into(),
            name_constraint: true,
            additional_name_constraints: vec!["example".into()],
            common_name: None,
        })
        .unwrap();
        assert!(ca_key.starts_with("-----BEGIN PRIVATE KEY-----"));
        let (cert, key) = generate_cert(&ca, &ca_key, &options(CertKind::Server)).unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----") && key.contains("PRIVATE KEY"));
        // The same key in SEC1 form, as Consul writes it, signs too.
        let sec1 = sec1_of_p256_pkcs8(&pkcs8_der(&ca_key));
        let sec1_pem = format!(
            "-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n",
            base64_lines(&sec1)
        );
        generate_cert(&ca, &sec1_pem, &options(CertKind::Client)).unwrap();
        assert!(generate_cert(&ca, "not a key", &options(CertKind::Cli))
            .unwrap_err()
            .starts_with("failed to parse CA key"));
        let mut zero_days = options(CertKind::Cli);
        zero_days.days = 0;
        assert!(generate_cert(&ca, &ca_key, &zero_days)
            .unwrap_err()
            .starts_with("-days must be between"));
    }

    fn pkcs8_der(pem: &str) -> Vec<u8> {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .secret_pkcs8_der()
            .to_vec()
    }

    /// The `ECPrivateKey` inside a P-256 PKCS#8 key: the last OCTET STRING's contents.
    fn sec1_of_p256_pkcs8(pkcs8: &[u8]) -> Vec<u8> {
        let algorithm_end = pkcs8
            .windows(8)
            .position(|w| w == [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07])
            .unwrap()
            + 8;
        assert_eq!(pkcs8[algorithm_end], 0x04);
        let (length, header) = match pkcs8[algorithm_end + 1] {
            0x81 => (pkcs8[algorithm_end + 2] as usize, 3),
            n => (n as usize, 2),
        };
        pkcs8[algorithm_end + header..algorithm_end + header + length].to_vec()
    }

    fn base64_lines(data: &[u8]) -> String {
        use base64::Engine;
        let text = base64::engine::general_purpose::STANDARD.encode(data);
        text.as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    }
}
