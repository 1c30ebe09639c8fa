//! SPIFFE IDs of Connect services: `spiffe://<trust-domain>/ns/<ns>/dc/<dc>/svc/<service>`,
//! the URI SAN of every leaf certificate the built-in CA signs and what a proxy reads from
//! its peer's certificate. Consul's `connect.SpiffeIDService`.

/// Longest SPIFFE URI accepted, in bytes (SPIFFE's own limit is 2048).
pub const SPIFFE_URI_BYTES_MAX: usize = 2048;

/// A service identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceId {
    pub trust_domain: String,
    pub namespace: String,
    pub datacenter: String,
    pub service: String,
}

impl ServiceId {
    pub fn new(trust_domain: &str, datacenter: &str, service: &str) -> ServiceId {
        ServiceId {
            trust_domain: trust_domain.to_string(),
            namespace: "default".to_string(),
            datacenter: datacenter.to_string(),
            service: service.to_string(),
        }
    }

    pub fn uri(&self) -> String {
        format!(
            "spiffe://{}/ns/{}/dc/{}/svc/{}",
            self.trust_domain,
            percent_encode(&self.namespace),
            percent_encode(&self.datacenter),
            percent_encode(&self.service)
        )
    }
}

/// Percent-encodes everything but RFC 3986's unreserved bytes: a SPIFFE path segment, or a
/// value in a URL's path or query.
pub fn percent_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unescape(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Why a URI is not a service identity, in Consul's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpiffeError {
    /// Not a SPIFFE URI at all: "not a valid Connect identifier".
    NotSpiffe,
    /// A SPIFFE URI, but not of a service (an agent, a signing ID).
    NotService,
}

/// Parses a service SPIFFE URI.
pub fn parse_service(uri: &str) -> Result<ServiceId, SpiffeError> {
    if uri.len() > SPIFFE_URI_BYTES_MAX {
        return Err(SpiffeError::NotSpiffe);
    }
    let rest = uri
        .strip_prefix("spiffe://")
        .or_else(|| {
            uri.get(..9)
                .filter(|p| p.eq_ignore_ascii_case("spiffe://"))
                .map(|_| &uri[9..])
        })
        .ok_or(SpiffeError::NotSpiffe)?;
    let (trust_domain, path) = rest.split_once('/').ok_or(SpiffeError::NotService)?;
    if trust_domain.is_empty() {
        return Err(SpiffeError::NotSpiffe);
    }
    let parts: Vec<&str> = path.split('/').collect();
    match parts[..] {
        ["ns", ns, "dc", dc, "svc", service] if !service.is_empty() => Ok(ServiceId {
            trust_domain: trust_domain.to_ascii_lowercase(),
            namespace: unescape(ns).ok_or(SpiffeError::NotService)?,
            datacenter: unescape(dc).ok_or(SpiffeError::NotService)?,
            service: unescape(service).ok_or(SpiffeError::NotService)?,
        }),
        // Consul's partitioned form names the default partition in the community edition.
        ["ap", "default", "ns", ns, "dc", dc, "svc", service] if !service.is_empty() => {
            Ok(ServiceId {
                trust_domain: trust_domain.to_ascii_lowercase(),
                namespace: unescape(ns).ok_or(SpiffeError::NotService)?,
                datacenter: unescape(dc).ok_or(SpiffeError::NotService)?,
                service: unescape(service).ok_or(SpiffeError::NotService)?,
            })
        }
        _ => Err(SpiffeError::NotService),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_round_trip_and_others_are_refused() {
        let id = ServiceId::new("11111111-2222-3333-4444-555555555555.consul", "dc1", "web");
        let uri = id.uri();
        assert_eq!(
            uri,
            "spiffe://11111111-2222-3333-4444-555555555555.consul/ns/default/dc/dc1/svc/web"
        );
        assert_eq!(parse_service(&uri).unwrap(), id);
        let odd = ServiceId::new("td.consul", "dc1", "a b/c");
        assert_eq!(parse_service(&odd.uri()).unwrap().service, "a b/c");
        assert_eq!(
            parse_service("https://x/ns/default/dc/dc1/svc/web"),
            Err(SpiffeError::NotSpiffe)
        );
        assert_eq!(
            parse_service("spiffe://td.consul/agent/client/dc/dc1/id/abc"),
            Err(SpiffeError::NotService)
        );
        assert_eq!(
            parse_service("spiffe://td.consul"),
            Err(SpiffeError::NotService)
        );
        assert_eq!(
            parse_service("spiffe://td.consul/ap/default/ns/default/dc/dc1/svc/db")
                .unwrap()
                .service,
            "db"
        );
    }
}
