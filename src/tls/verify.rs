//! Certificate checks beyond rustls' defaults, and the words for a failed handshake.
//!
//! - [`ChainVerifier`]: a server certificate verifier that checks the chain against the CA but
//!   not the name (Consul's `verify_outgoing` without `verify_server_hostname`: agents dial
//!   servers by address, and only the hostname switch asks the certificate for a name), or
//!   checks nothing but the handshake signatures (`CONSUL_HTTP_SSL_VERIFY=false`).
//! - [`authorize_server_peer`]: the server-role check on an incoming connection that wants to
//!   act as a server (Raft): its certificate must chain to the agent CA *as a client
//!   certificate* and carry `server.<datacenter>.<domain>`, so a node holding only a client
//!   certificate can never join Raft (CVE-2021-37219).
//! - [`describe_error`]: one line for the classic failures (wrong CA, expired, name mismatch,
//!   missing client certificate, no common version), for the log line naming the peer.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{AlertDescription, CertificateError, DigitallySignedStruct, Error, SignatureScheme};
use std::sync::Arc;

/// Verifies a server's certificate chain against `roots` without asking it for a name; with no
/// roots, verifies nothing but the handshake signatures (the session is then at least with the
/// holder of the presented key).
#[derive(Debug)]
pub struct ChainVerifier {
    roots: Option<Arc<rustls::RootCertStore>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ChainVerifier {
    /// Checks the chain against `roots`, not the name.
    pub fn chain_only(roots: Arc<rustls::RootCertStore>) -> ChainVerifier {
        assert!(!roots.is_empty(), "a chain check needs at least one CA");
        ChainVerifier {
            roots: Some(roots),
            provider: super::files::crypto_provider(),
        }
    }

    /// Checks neither chain nor name: Go's `InsecureSkipVerify`.
    pub fn accept_any() -> ChainVerifier {
        ChainVerifier {
            roots: None,
            provider: super::files::crypto_provider(),
        }
    }
}

impl ServerCertVerifier for ChainVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if let Some(roots) = &self.roots {
            let certificate = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &certificate,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The name a server's certificate carries: `server.<datacenter>.<domain>`, with any trailing
/// dot of the domain removed (Consul's `ServerSNI` for no particular node).
pub fn server_name_for(datacenter: &str, domain: &str) -> String {
    assert!(!datacenter.is_empty() && !domain.is_empty());
    format!("server.{datacenter}.{}", domain.trim_end_matches('.'))
}

/// Checks that a peer connecting to act as a server presents a certificate for
/// `expected_name` that chains to `roots` as a *client* certificate (its side of the
/// connection). `chain` is the peer's chain as the handshake received it (end entity first).
/// The handshake has already verified the chain against the CA; this repeats that against the
/// manually configured CA only (so a CA trusted for other reasons, e.g. a future Connect CA,
/// never makes a server) and adds the name.
pub fn authorize_server_peer(
    chain: Option<&[CertificateDer<'_>]>,
    roots: &rustls::RootCertStore,
    expected_name: &str,
    now: UnixTime,
) -> Result<(), String> {
    let chain = match chain {
        Some(chain) if !chain.is_empty() => chain,
        _ => {
            return Err(format!(
                "no certificate presented; acting as a server requires one for {expected_name}"
            ))
        }
    };
    let name = ServerName::try_from(expected_name)
        .map_err(|e| format!("invalid server name {expected_name:?}: {e}"))?;
    let end_entity = webpki::EndEntityCert::try_from(&chain[0])
        .map_err(|e| format!("unparsable certificate: {e}"))?;
    let algorithms = rustls::crypto::ring::default_provider()
        .signature_verification_algorithms
        .all;
    end_entity
        .verify_for_usage(
            algorithms,
            &roots.roots,
            &chain[1..],
            now,
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(|e| {
            format!(
                "certificate is not a client certificate of the agent CA: {}",
                describe_webpki_error(&e)
            )
        })?;
    end_entity
        .verify_is_valid_for_subject_name(&name)
        .map_err(|_| {
            format!(
                "certificate is not valid for {expected_name}{}: only a server certificate may act as a server",
                presented_names(&chain[0])
            )
        })?;
    Ok(())
}

/// `Ok` when `certificate` is valid for the DNS name `name`; otherwise the names it carries,
/// as ` (it names a, b)`.
pub fn certificate_names(certificate: &CertificateDer<'_>, name: &str) -> Result<(), String> {
    let server_name =
        ServerName::try_from(name).map_err(|_| format!(" ({name:?} is not a DNS name)"))?;
    let parsed = webpki::EndEntityCert::try_from(certificate)
        .map_err(|_| " (the certificate does not parse)".to_string())?;
    parsed
        .verify_is_valid_for_subject_name(&server_name)
        .map_err(|_| presented_names(certificate))
}

/// ` (it names a, b)` for the DNS names and addresses a certificate carries, or nothing.
fn presented_names(certificate: &CertificateDer<'_>) -> String {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, parsed)) = X509Certificate::from_der(certificate) else {
        return String::new();
    };
    let mut names = Vec::new();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => names.push(dns.to_string()),
                GeneralName::IPAddress(bytes) => {
                    if let Ok(octets) = <[u8; 4]>::try_from(*bytes) {
                        names.push(std::net::Ipv4Addr::from(octets).to_string());
                    } else if let Ok(octets) = <[u8; 16]>::try_from(*bytes) {
                        names.push(std::net::Ipv6Addr::from(octets).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    if names.is_empty() {
        String::new()
    } else {
        format!(" (it names {})", names.join(", "))
    }
}

fn describe_webpki_error(error: &webpki::Error) -> String {
    match error {
        webpki::Error::UnknownIssuer => "signed by an unknown authority (wrong CA?)".to_string(),
        webpki::Error::CertExpired { .. } => "certificate has expired".to_string(),
        webpki::Error::CertNotValidYet { .. } => "certificate is not valid yet".to_string(),
        webpki::Error::RequiredEkuNotFoundContext(_) => {
            "certificate is not allowed for client authentication (extended key usage)".to_string()
        }
        other => format!("{other:?}"),
    }
}

/// Seconds since the epoch as a readable UTC time (`2026-01-02 03:04:05 UTC`).
fn utc_text(time: UnixTime) -> String {
    let seconds = time.as_secs() as i64;
    match time_from_unix(seconds) {
        Some(text) => text,
        None => format!("{seconds}s after the epoch"),
    }
}

fn time_from_unix(seconds: i64) -> Option<String> {
    let moment = ::time::OffsetDateTime::from_unix_timestamp(seconds).ok()?;
    Some(format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        moment.year(),
        u8::from(moment.month()),
        moment.day(),
        moment.hour(),
        moment.minute(),
        moment.second()
    ))
}

/// One line saying why a handshake failed, in an operator's words: a certificate we rejected
/// reads "peer certificate rejected", one the peer rejected "the peer aborted the handshake".
pub fn describe_error(error: &Error) -> String {
    match error {
        Error::InvalidCertificate(certificate) => {
            format!(
                "peer certificate rejected: {}",
                describe_certificate_error(certificate)
            )
        }
        Error::NoCertificatesPresented => {
            "the peer presented no certificate, and one is required (verify_incoming)".to_string()
        }
        Error::AlertReceived(alert) => describe_alert(*alert),
        Error::PeerIncompatible(why) => {
            format!("no TLS version or cipher suite in common with the peer ({why:?})")
        }
        Error::InvalidMessage(why) => format!("not a TLS handshake ({why:?})"),
        Error::PeerMisbehaved(why) => format!("the peer broke the TLS protocol ({why:?})"),
        Error::NoApplicationProtocol => "no application protocol (ALPN) in common".to_string(),
        other => other.to_string(),
    }
}

fn describe_certificate_error(error: &CertificateError) -> String {
    match error {
        CertificateError::UnknownIssuer => {
            "signed by an unknown authority (wrong CA, or the CA file is not the one that signed it)"
                .to_string()
        }
        CertificateError::Expired => "certificate has expired".to_string(),
        CertificateError::ExpiredContext { time, not_after } => format!(
            "certificate expired at {} (now {})",
            utc_text(*not_after),
            utc_text(*time)
        ),
        CertificateError::NotValidYet => "certificate is not valid yet".to_string(),
        CertificateError::NotValidYetContext { time, not_before } => format!(
            "certificate is not valid before {} (now {})",
            utc_text(*not_before),
            utc_text(*time)
        ),
        CertificateError::NotValidForName => "certificate is not valid for the name dialed".to_string(),
        CertificateError::NotValidForNameContext { expected, presented } => format!(
            "certificate is not valid for {}{}",
            server_name_text(expected),
            if presented.is_empty() {
                " (it names nothing)".to_string()
            } else {
                let names: Vec<&str> = presented.iter().map(|n| plain_name(n)).collect();
                format!(" (it names {})", names.join(", "))
            }
        ),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "certificate is not allowed for this use (extended key usage)".to_string()
        }
        CertificateError::BadSignature | CertificateError::BadEncoding => {
            "certificate is malformed or badly signed".to_string()
        }
        CertificateError::Revoked => "certificate is revoked".to_string(),
        other => format!("{other:?}"),
    }
}

/// A name as webpki's error lists it (`DnsName("a.b")`, `IpAddress(10.0.0.1)`), unwrapped.
fn plain_name(listed: &str) -> &str {
    for (prefix, suffix) in [
        ("DnsName(\"", "\")"),
        ("UniformResourceIdentifier(\"", "\")"),
        ("IpAddress(", ")"),
    ] {
        if let Some(inner) = listed
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
        {
            return inner;
        }
    }
    listed
}

fn server_name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(dns) => dns.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

fn describe_alert(alert: AlertDescription) -> String {
    let why = match alert {
        AlertDescription::UnknownCA => "it does not trust the CA that signed our certificate",
        AlertDescription::BadCertificate => "it rejected our certificate",
        AlertDescription::CertificateExpired => "our certificate has expired",
        AlertDescription::CertificateRequired => {
            "it requires a client certificate and we sent none"
        }
        AlertDescription::HandshakeFailure => {
            "no acceptable parameters (TLS version, cipher suite or certificate)"
        }
        AlertDescription::ProtocolVersion => "no TLS version in common",
        AlertDescription::UnrecognisedName => "it does not serve the name we asked for",
        _ => return format!("the peer aborted the handshake ({alert:?})"),
    };
    format!("the peer aborted the handshake: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_drop_the_trailing_dot() {
        assert_eq!(server_name_for("dc1", "consul."), "server.dc1.consul");
        assert_eq!(
            server_name_for("east", "example.com"),
            "server.east.example.com"
        );
    }

    #[test]
    fn classic_failures_read_as_sentences() {
        let expired = Error::InvalidCertificate(CertificateError::ExpiredContext {
            time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_800_000_000)),
            not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_700_000_000)),
        });
        assert_eq!(
            describe_error(&expired),
            "peer certificate rejected: certificate expired at 2023-11-14 22:13:20 UTC (now 2027-01-15 08:00:00 UTC)"
        );
        assert!(
            describe_error(&Error::InvalidCertificate(CertificateError::UnknownIssuer))
                .contains("unknown authority")
        );
        assert!(describe_error(&Error::NoCertificatesPresented).contains("no certificate"));
        assert!(
            describe_error(&Error::AlertReceived(AlertDescription::UnknownCA))
                .contains("does not trust the CA")
        );
        let mismatch = Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("server.dc1.consul").unwrap(),
            presented: vec!["DnsName(\"client.dc1.consul\")".to_string()],
        });
        assert_eq!(
            describe_error(&mismatch),
            "peer certificate rejected: certificate is not valid for server.dc1.consul (it names client.dc1.consul)"
        );
        for error in [expired, mismatch, Error::NoCertificatesPresented] {
            assert!(!describe_error(&error).contains('\n'));
        }
    }
}
