//! The Connect CA: `ConnectCA.Roots` (a `DCSpecificRequest`, answered with
//! `IndexedCARoots`) and `ConnectCA.Sign` (`CASignRequest`, answered with `IssuedCert`), as
//! Consul's `connect_ca_endpoint.go` serves them. A client agent reads the roots' active ID
//! and trust domain, and a signed leaf, back from the replies ([`read_ca_roots`],
//! [`read_issued_cert`]). A root's signing key never travels: `SigningKey` is always empty.
//! `ConnectCA.ConfigurationGet` (a `DCSpecificRequest`) answers the CA's configuration
//! ([`CaConfiguration`]); `ConnectCA.ConfigurationSet` takes a [`CaRequest`] and answers nil.

use super::{each_field, go_time_binary, read_reply, write_string_list, Fields, QueryMeta};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::mesh::ca::CaRoot;

/// `CASignRequest`: a CSR (PEM) to sign, and the token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaSignRequest<'a> {
    pub datacenter: &'a str,
    pub csr: &'a str,
    pub token: &'a str,
}

impl<'a> CaSignRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<CaSignRequest<'a>, WireError> {
        let mut request = CaSignRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "CSR" => request.csr = r.str()?,
                _ => return super::write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 3);
        f.field("CSR").str(self.csr);
        f.field("Datacenter").str(self.datacenter);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// One `CARoot`, its signing key left out.
fn write_root(w: &mut Writer, root: &CaRoot) {
    let mut f = Fields::new(w, 17);
    f.field("Active").bool(root.active);
    f.field("CreateIndex").uint(root.create_index);
    f.field("ExternalTrustDomain")
        .str(&root.external_trust_domain);
    f.field("ID").str(&root.id);
    write_string_list(
        f.field("IntermediateCerts"),
        root.intermediate_certs.iter().map(|c| &**c),
        true,
    );
    f.field("ModifyIndex").uint(root.modify_index);
    f.field("Name").str(&root.name);
    f.field("NotAfter")
        .bytes(&go_time_binary(root.not_after_unix_s * NANOS_PER_SECOND));
    f.field("NotBefore")
        .bytes(&go_time_binary(root.not_before_unix_s * NANOS_PER_SECOND));
    f.field("PrivateKeyBits")
        .int(i64::from(root.private_key_bits));
    f.field("PrivateKeyType").str(&root.private_key_type);
    f.field("RootCert").str(&root.root_cert_pem);
    // Go's zero time for a root still active.
    let rotated_out_ns = root
        .rotated_out_at_ms
        .map_or(i64::MIN, |ms| (ms as i64).saturating_mul(1_000_000));
    if rotated_out_ns == i64::MIN {
        f.field("RotatedOutAt").bytes(&GO_ZERO_TIME);
    } else {
        f.field("RotatedOutAt")
            .bytes(&go_time_binary(rotated_out_ns));
    }
    f.field("SerialNumber").uint(root.serial_number);
    f.field("SigningCert").str(&root.signing_cert_pem);
    f.field("SigningKey").str("");
    f.field("SigningKeyID").str(&root.signing_key_id);
    f.finish();
}

/// Go's `time.Time{}.MarshalBinary()`: version 1, second 0 of year 1, UTC.
const GO_ZERO_TIME: [u8; 15] = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

/// `IndexedCARoots`: the active root's ID, the trust domain, and every root.
pub fn write_ca_roots(
    w: &mut Writer,
    meta: &QueryMeta,
    active_root_id: &str,
    trust_domain: &str,
    roots: &[std::sync::Arc<CaRoot>],
) {
    meta.write_reply(
        w,
        &["ActiveRootID", "Roots", "TrustDomain"],
        |name, w| match name {
            "ActiveRootID" => w.str(active_root_id),
            "Roots" => {
                if roots.is_empty() {
                    w.nil();
                } else {
                    w.array_len(roots.len());
                    for root in roots {
                        write_root(w, root);
                    }
                }
            }
            _ => w.str(trust_domain),
        },
    );
}

/// What a client agent needs of `IndexedCARoots`: the active root and the trust domain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaRootsView<'a> {
    pub active_root_id: &'a str,
    pub trust_domain: &'a str,
}

/// Reads an `IndexedCARoots` reply.
pub fn read_ca_roots(body: &[u8]) -> Result<(QueryMeta, CaRootsView<'_>), WireError> {
    let mut view = CaRootsView::default();
    let meta = read_reply(body, |name, r| {
        match name {
            "ActiveRootID" => view.active_root_id = r.str()?,
            "TrustDomain" => view.trust_domain = r.str()?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((meta, view))
}

/// Most roots one `IndexedCARoots` reply may list when read whole: far more than rotation
/// keeps (an active root and the rotated-out ones until they expire); more is a broken or
/// hostile answer.
pub const ROOTS_PER_ANSWER_MAX: usize = 64;

/// An `IndexedCARoots` reply read whole (a secondary datacenter replicating its primary's
/// roots): the active root's ID, the trust domain, and every root as the store keeps one,
/// without keys (none travel).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaRootsReply {
    pub active_root_id: String,
    pub trust_domain: String,
    pub roots: Vec<CaRoot>,
}

/// Reads an `IndexedCARoots` reply whole; a root without its ID or certificate is refused.
pub fn read_ca_roots_whole(body: &[u8]) -> Result<(QueryMeta, CaRootsReply), WireError> {
    let mut reply = CaRootsReply::default();
    let meta = read_reply(body, |name, r| {
        match name {
            "ActiveRootID" => reply.active_root_id = r.str()?.to_string(),
            "TrustDomain" => reply.trust_domain = r.str()?.to_string(),
            "Roots" => {
                if r.try_nil()? {
                    return Ok(true);
                }
                let count = r.array_len()?;
                if count > ROOTS_PER_ANSWER_MAX {
                    return Err(WireError::TooLarge {
                        what: "roots of one answer",
                        limit: ROOTS_PER_ANSWER_MAX,
                    });
                }
                reply.roots.reserve(count);
                for _ in 0..count {
                    reply.roots.push(read_root(r)?);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((meta, reply))
}

/// One `CARoot` as [`write_root`] writes it, keys left empty.
fn read_root(r: &mut Reader) -> Result<CaRoot, WireError> {
    use arcstr::ArcStr;
    let mut root = CaRoot::default();
    each_field(r, |name, r| {
        match name {
            "Active" => root.active = r.bool()?,
            "CreateIndex" => root.create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => root.modify_index = r.u64("ModifyIndex")?,
            "ExternalTrustDomain" => root.external_trust_domain = ArcStr::from(r.str()?),
            "ID" => root.id = ArcStr::from(r.str()?),
            "IntermediateCerts" => {
                if r.try_nil()? {
                    return Ok(true);
                }
                let count = r.array_len()?;
                if count > ROOTS_PER_ANSWER_MAX {
                    return Err(WireError::TooLarge {
                        what: "intermediates of one root",
                        limit: ROOTS_PER_ANSWER_MAX,
                    });
                }
                for _ in 0..count {
                    root.intermediate_certs.push(ArcStr::from(r.str()?));
                }
            }
            "Name" => root.name = ArcStr::from(r.str()?),
            "NotAfter" => root.not_after_unix_s = go_time_unix_s(r.bytes()?)?,
            "NotBefore" => root.not_before_unix_s = go_time_unix_s(r.bytes()?)?,
            "PrivateKeyBits" => {
                root.private_key_bits = u32::try_from(r.i64("PrivateKeyBits")?).map_err(|_| {
                    WireError::IntegerOverflow {
                        field: "PrivateKeyBits",
                    }
                })?
            }
            "PrivateKeyType" => root.private_key_type = ArcStr::from(r.str()?),
            "RootCert" => root.root_cert_pem = ArcStr::from(r.str()?),
            "SerialNumber" => root.serial_number = r.u64("SerialNumber")?,
            "SigningKeyID" => root.signing_key_id = ArcStr::from(r.str()?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if root.id.is_empty() || root.root_cert_pem.is_empty() {
        return Err(WireError::Invalid("a root without its ID or certificate"));
    }
    Ok(root)
}

/// A signed leaf as `IssuedCert` carries it (without a private key: the agent made it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IssuedCert<'a> {
    pub serial_number: &'a str,
    /// A client agent's certificate (`AutoEncrypt.Sign`): its node name and SPIFFE ID;
    /// empty for a service's leaf.
    pub agent: &'a str,
    pub agent_uri: &'a str,
    /// The leaf and the intermediates that chain it to the roots, PEM.
    pub cert_pem: &'a str,
    pub service: &'a str,
    pub service_uri: &'a str,
    pub valid_after_unix_s: i64,
    pub valid_before_unix_s: i64,
    /// The store index the leaf was signed at (`CreateIndex` and `ModifyIndex`).
    pub index: u64,
}

/// `IssuedCert`.
pub fn write_issued_cert(w: &mut Writer, cert: &IssuedCert) {
    let mut f = Fields::new(w, 14);
    f.field("Agent").str(cert.agent);
    f.field("AgentURI").str(cert.agent_uri);
    f.field("CertPEM").str(cert.cert_pem);
    f.field("CreateIndex").uint(cert.index);
    f.field("Kind").str("");
    f.field("KindURI").str("");
    f.field("ModifyIndex").uint(cert.index);
    f.field("PrivateKeyPEM").str("");
    f.field("SerialNumber").str(cert.serial_number);
    f.field("ServerURI").str("");
    f.field("Service").str(cert.service);
    f.field("ServiceURI").str(cert.service_uri);
    f.field("ValidAfter")
        .bytes(&go_time_binary(cert.valid_after_unix_s * NANOS_PER_SECOND));
    f.field("ValidBefore")
        .bytes(&go_time_binary(cert.valid_before_unix_s * NANOS_PER_SECOND));
    f.finish();
}

/// Seconds since the Unix epoch of Go's `time.Time` binary form (version 1, or 2 with a
/// seconds offset), read as go-msgpack writes it.
fn go_time_unix_s(bytes: &[u8]) -> Result<i64, WireError> {
    /// Seconds from 0001-01-01 to 1970-01-01 (Go's `unixToInternal`).
    const UNIX_TO_INTERNAL_SECONDS: i64 = 62_135_596_800;
    match bytes {
        [1 | 2, seconds @ .., _, _, _, _, _, _] | [2, seconds @ .., _, _, _, _, _, _, _]
            if seconds.len() == 8 =>
        {
            let seconds = i64::from_be_bytes(seconds.try_into().expect("eight bytes"));
            Ok(seconds - UNIX_TO_INTERNAL_SECONDS)
        }
        _ => Err(WireError::Invalid("a time that is not Go's binary form")),
    }
}

/// Reads an `IssuedCert` reply.
pub fn read_issued_cert(body: &[u8]) -> Result<IssuedCert<'_>, WireError> {
    read_issued_cert_from(&mut Reader::new(body))
}

/// Reads an `IssuedCert` where it stands in a larger value.
pub fn read_issued_cert_from<'a>(reader: &mut Reader<'a>) -> Result<IssuedCert<'a>, WireError> {
    let mut cert = IssuedCert::default();
    each_field(reader, |name, r| {
        match name {
            "SerialNumber" => cert.serial_number = r.str()?,
            "Agent" => cert.agent = r.str()?,
            "AgentURI" => cert.agent_uri = r.str()?,
            "CertPEM" => cert.cert_pem = r.str()?,
            "Service" => cert.service = r.str()?,
            "ServiceURI" => cert.service_uri = r.str()?,
            "ValidAfter" => cert.valid_after_unix_s = go_time_unix_s(r.bytes()?)?,
            "ValidBefore" => cert.valid_before_unix_s = go_time_unix_s(r.bytes()?)?,
            "ModifyIndex" => cert.index = r.u64("ModifyIndex")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(cert)
}

/// `CAConfiguration`: the CA's provider and its free-form `Config`, which crosses as the
/// map of the JSON values praetor stores (a duration stays text such as `"72h"`, as it was
/// written; see `docs/decisions.md`, *config entries as typed calls*). praetor's built-in
/// provider keeps no `State`: it travels as nil.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaConfiguration {
    pub cluster_id: String,
    pub provider: String,
    /// `Config`; `Null` for a nil map.
    pub config: serde_json::Value,
    pub force_without_cross_signing: bool,
    pub create_index: u64,
    pub modify_index: u64,
}

impl CaConfiguration {
    pub fn write(&self, w: &mut Writer) {
        let mut f = Fields::new(w, 7);
        f.field("ClusterID").str(&self.cluster_id);
        super::write_json(f.field("Config"), &self.config);
        f.field("CreateIndex").uint(self.create_index);
        f.field("ForceWithoutCrossSigning")
            .bool(self.force_without_cross_signing);
        f.field("ModifyIndex").uint(self.modify_index);
        f.field("Provider").str(&self.provider);
        f.field("State").nil();
        f.finish();
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.write(&mut w);
        w.into_inner()
    }

    pub fn read(r: &mut Reader) -> Result<CaConfiguration, WireError> {
        let mut config = CaConfiguration::default();
        each_field(r, |name, r| {
            match name {
                "ClusterID" => config.cluster_id = r.str()?.to_string(),
                "Provider" => config.provider = r.str()?.to_string(),
                "Config" => config.config = super::read_json(r)?,
                "ForceWithoutCrossSigning" => config.force_without_cross_signing = r.bool()?,
                "CreateIndex" => config.create_index = r.u64("CreateIndex")?,
                "ModifyIndex" => config.modify_index = r.u64("ModifyIndex")?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(config)
    }

    pub fn decode(body: &[u8]) -> Result<CaConfiguration, WireError> {
        CaConfiguration::read(&mut Reader::new(body))
    }
}

/// `CARequest`: `Op` (`set-config` for `ConnectCA.ConfigurationSet`), the configuration, and
/// the token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaRequest<'a> {
    pub datacenter: &'a str,
    pub op: &'a str,
    /// `Config`; `None` for nil.
    pub config: Option<CaConfiguration>,
    pub token: &'a str,
}

impl<'a> CaRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<CaRequest<'a>, WireError> {
        let mut request = CaRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Op" => request.op = r.str()?,
                "Config" => {
                    request.config = if r.try_nil()? {
                        None
                    } else {
                        Some(CaConfiguration::read(r)?)
                    }
                }
                _ => return super::write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        match &self.config {
            Some(config) => config.write(f.field("Config")),
            None => f.field("Config").nil(),
        }
        f.field("Datacenter").str(self.datacenter);
        f.field("Op").str(self.op);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_cert_and_a_sign_request_read_back_as_written() {
        let cert = IssuedCert {
            serial_number: "0a:0b",
            agent: "",
            agent_uri: "",
            cert_pem: "-----BEGIN CERTIFICATE-----\n",
            service: "web",
            service_uri: "spiffe://t.consul/ns/default/dc/dc1/svc/web",
            valid_after_unix_s: 1_700_000_000,
            valid_before_unix_s: 1_700_259_200,
            index: 42,
        };
        let mut w = Writer::new();
        write_issued_cert(&mut w, &cert);
        let body = w.into_inner();
        assert_eq!(read_issued_cert(&body).unwrap(), cert);
        let request = CaSignRequest {
            datacenter: "dc1",
            csr: "csr",
            token: "t",
        };
        assert_eq!(CaSignRequest::decode(&request.encode()).unwrap(), request);
        assert!(go_time_unix_s(&[3; 15]).is_err());
        assert_eq!(go_time_unix_s(&GO_ZERO_TIME).unwrap(), -62_135_596_800);
    }

    #[test]
    fn a_roots_reply_read_whole_keeps_every_root_without_keys() {
        let root = CaRoot {
            id: "b".into(),
            name: "new".into(),
            root_cert_pem: "pem-b".into(),
            intermediate_certs: vec!["x".into()],
            active: true,
            private_key_type: "ec".into(),
            private_key_bits: 384,
            serial_number: 7,
            not_before_unix_s: 1_700_000_000,
            not_after_unix_s: 1_893_456_000,
            signing_key_pem: "secret".into(),
            ..CaRoot::default()
        };
        let mut w = Writer::new();
        let meta = QueryMeta {
            index: 9,
            ..QueryMeta::default()
        };
        write_ca_roots(
            &mut w,
            &meta,
            "b",
            "t.consul",
            &[std::sync::Arc::new(root.clone())],
        );
        let (read_meta, reply) = read_ca_roots_whole(&w.into_inner()).unwrap();
        assert_eq!(read_meta.index, 9);
        assert_eq!(
            (&*reply.active_root_id, &*reply.trust_domain),
            ("b", "t.consul")
        );
        let expected = CaRoot {
            signing_key_pem: "".into(),
            ..root
        };
        assert_eq!(reply.roots, vec![expected]);
        // The primary before its CA exists: no roots.
        let mut w = Writer::new();
        write_ca_roots(&mut w, &meta, "", "", &[]);
        assert!(read_ca_roots_whole(&w.into_inner())
            .unwrap()
            .1
            .roots
            .is_empty());
        // A root without its certificate.
        let mut w = Writer::new();
        write_ca_roots(
            &mut w,
            &meta,
            "a",
            "t",
            &[std::sync::Arc::new(CaRoot {
                id: "a".into(),
                ..CaRoot::default()
            })],
        );
        assert!(read_ca_roots_whole(&w.into_inner()).is_err());
    }

    #[test]
    fn a_ca_configuration_and_its_request_read_back_as_written() {
        let config = CaConfiguration {
            cluster_id: "c1".into(),
            provider: "consul".into(),
            config: serde_json::json!({"LeafCertTTL": "72h", "PrivateKeyBits": 256}),
            force_without_cross_signing: true,
            create_index: 3,
            modify_index: 9,
        };
        assert_eq!(CaConfiguration::decode(&config.encode()).unwrap(), config);
        let request = CaRequest {
            datacenter: "dc1",
            op: "set-config",
            config: Some(config),
            token: "t",
        };
        assert_eq!(CaRequest::decode(&request.encode()).unwrap(), request);
        let empty = CaRequest::default();
        assert_eq!(CaRequest::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn the_roots_reply_names_the_active_root_and_the_trust_domain() {
        let meta = QueryMeta {
            index: 7,
            ..QueryMeta::default()
        };
        let mut w = Writer::new();
        write_ca_roots(&mut w, &meta, "aa:bb", "t.consul", &[]);
        let body = w.into_inner();
        let (read_meta, view) = read_ca_roots(&body).unwrap();
        assert_eq!(read_meta.index, 7);
        assert_eq!(
            view,
            CaRootsView {
                active_root_id: "aa:bb",
                trust_domain: "t.consul",
            }
        );
    }
}
