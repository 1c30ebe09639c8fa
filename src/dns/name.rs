//! Reading a question name as one of Consul's DNS name forms.
//!
//! The name is matched against `domain` and `alt_domain` (the longer first, so that an
//! alternate domain nested inside the primary is recognised). What precedes the domain is
//! scanned from the right for the first keyword — `service`, `node`, `query`, `addr`, and the
//! mesh forms `connect`, `ingress`, `virtual` — as Consul does; labels after the keyword name
//! the datacenter (`<dc>` or `<dc>.dc`). An SRV question whose label before the domain (or
//! datacenter) starts with `_` is the RFC 2782 form without the `service` keyword.
//!
//! Names outside both domains are reverse lookups (`in-addr.arpa`, `ip6.arpa`) or belong to
//! the recursors.

use crate::proto::dns::{rtype, WireName};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which configured domain a question used; answers are written in the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainUsed {
    Primary,
    Alternate,
}

/// What a question name asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The domain itself (`consul.`).
    Apex,
    /// `[tag.]<service>.service[.<dc>]` or `_<service>._<tag|tcp>[.service][.<dc>]`.
    Service {
        service: String,
        tag: Option<String>,
        datacenter: Option<String>,
    },
    /// `<node>.node[.<dc>]` (a node name may contain dots).
    Node {
        node: String,
        datacenter: Option<String>,
    },
    /// `<query>.query[.<dc>]`.
    PreparedQuery {
        query: String,
        datacenter: Option<String>,
    },
    /// `<hex>.addr[.<dc>]`: the address spelled in hex (8 digits for IPv4, 32 for IPv6).
    Addr(IpAddr),
    /// `<service>.connect[.<dc>]`: the proxies fronting the service and its native instances.
    Connect {
        service: String,
        datacenter: Option<String>,
    },
    /// `<service>.ingress[.<dc>]`: the ingress gateways that expose the service.
    Ingress {
        service: String,
        datacenter: Option<String>,
    },
    /// A mesh form praetor does not serve (`virtual`).
    Unsupported,
    /// Inside the domain but not a valid form: NXDOMAIN.
    Invalid,
    /// A reverse name (`in-addr.arpa`, `ip6.arpa`); `None` when it spells no full address.
    Reverse(Option<IpAddr>),
    /// Outside every domain this agent answers for.
    Outside,
}

/// A classified question name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedName {
    pub lookup: Lookup,
    pub domain: DomainUsed,
}

/// The configured domains as label lists, prepared once per agent.
#[derive(Clone, Debug)]
pub struct Domains {
    pub primary: Vec<Vec<u8>>,
    pub alternate: Option<Vec<Vec<u8>>>,
}

impl Domains {
    /// `domain` and `alt_domain` as normalized by the config (lowercase, no outer dots).
    pub fn new(primary: &str, alternate: Option<&str>) -> Domains {
        let labels = |d: &str| d.split('.').map(|l| l.as_bytes().to_vec()).collect();
        Domains {
            primary: labels(primary),
            alternate: alternate.map(labels),
        }
    }

    /// The dotted domain to answer in.
    pub fn text(&self, used: DomainUsed) -> String {
        let labels = match (used, &self.alternate) {
            (DomainUsed::Alternate, Some(alt)) => alt,
            _ => &self.primary,
        };
        labels
            .iter()
            .map(|l| String::from_utf8_lossy(l))
            .collect::<Vec<_>>()
            .join(".")
    }
}

fn ends_with(labels: &[&[u8]], suffix: &[Vec<u8>]) -> bool {
    labels.len() >= suffix.len()
        && labels[labels.len() - suffix.len()..]
            .iter()
            .zip(suffix)
            .all(|(a, b)| a.eq_ignore_ascii_case(b))
}

/// Classifies `name` for a question of type `qtype`.
pub fn parse(name: &WireName, qtype: u16, domains: &Domains) -> ParsedName {
    let labels: Vec<&[u8]> = name.labels().collect();
    let mut candidates = vec![(&domains.primary, DomainUsed::Primary)];
    if let Some(alt) = &domains.alternate {
        candidates.push((alt, DomainUsed::Alternate));
    }
    candidates.sort_by_key(|(d, _)| std::cmp::Reverse(d.len()));
    for (domain, used) in candidates {
        if ends_with(&labels, domain) {
            let inner = &labels[..labels.len() - domain.len()];
            return ParsedName {
                lookup: parse_inner(inner, qtype),
                domain: used,
            };
        }
    }
    ParsedName {
        lookup: parse_outside(&labels),
        domain: DomainUsed::Primary,
    }
}

fn parse_inner(raw: &[&[u8]], qtype: u16) -> Lookup {
    if raw.is_empty() {
        return Lookup::Apex;
    }
    let mut labels = Vec::with_capacity(raw.len());
    for label in raw {
        match std::str::from_utf8(label) {
            Ok(text) => labels.push(text.to_ascii_lowercase()),
            Err(_) => return Lookup::Invalid,
        }
    }
    // The rightmost keyword splits the name into parts (left) and locality (right).
    let mut split = None;
    for i in (0..labels.len()).rev() {
        match labels[i].as_str() {
            "service" | "connect" | "virtual" | "ingress" | "node" | "query" | "addr" => {
                split = Some((labels[i].clone(), i, i + 1));
                break;
            }
            label if qtype == rtype::SRV && label.starts_with('_') => {
                split = Some(("service".to_string(), i + 1, i + 1));
                break;
            }
            _ => {}
        }
    }
    let Some((kind, parts_end, suffix_start)) = split else {
        return Lookup::Invalid;
    };
    let parts = &labels[..parts_end];
    let Some(datacenter) = parse_locality(&labels[suffix_start..]) else {
        return Lookup::Invalid;
    };
    if parts.is_empty() {
        return Lookup::Invalid;
    }
    match kind.as_str() {
        "service" => {
            let n = parts.len();
            if n == 2 && parts[0].starts_with('_') && parts[1].starts_with('_') {
                let tag = &parts[1][1..];
                Lookup::Service {
                    service: parts[0][1..].to_string(),
                    tag: (tag != "tcp" && !tag.is_empty()).then(|| tag.to_string()),
                    datacenter,
                }
            } else {
                Lookup::Service {
                    service: parts[n - 1].clone(),
                    tag: (n >= 2).then(|| parts[..n - 1].join(".")),
                    datacenter,
                }
            }
        }
        "node" => Lookup::Node {
            node: parts.join("."),
            datacenter,
        },
        "connect" => {
            if parts.len() != 1 {
                return Lookup::Invalid;
            }
            Lookup::Connect {
                service: parts[0].clone(),
                datacenter,
            }
        }
        "ingress" => {
            if parts.len() != 1 {
                return Lookup::Invalid;
            }
            Lookup::Ingress {
                service: parts[0].clone(),
                datacenter,
            }
        }
        "query" => {
            let n = parts.len();
            // `_<query>._<proto>` is the RFC 2782 spelling; the protocol label is ignored.
            let query = if n >= 2 && parts[0].starts_with('_') && parts[n - 1].starts_with('_') {
                parts[..n - 1].join(".")[1..].to_string()
            } else {
                parts.join(".")
            };
            Lookup::PreparedQuery { query, datacenter }
        }
        "addr" => {
            if parts.len() != 1 {
                return Lookup::Invalid;
            }
            match parse_hex_address(&parts[0]) {
                Some(ip) => Lookup::Addr(ip),
                None => Lookup::Invalid,
            }
        }
        _ => Lookup::Unsupported,
    }
}

/// `[]`, `[<dc>]` or `[<dc>, "dc"]` → the datacenter, if the form is valid.
fn parse_locality(labels: &[String]) -> Option<Option<String>> {
    match labels {
        [] => Some(None),
        [dc] => Some(Some(dc.clone())),
        [dc, kind] if kind == "dc" => Some(Some(dc.clone())),
        _ => None,
    }
}

fn parse_hex_address(hex: &str) -> Option<IpAddr> {
    let bytes = |n: usize| -> Option<Vec<u8>> {
        if hex.len() != n * 2 {
            return None;
        }
        (0..n)
            .map(|i| u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok())
            .collect()
    };
    match hex.len() {
        8 => {
            let b = bytes(4)?;
            Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
        }
        32 => {
            let b: [u8; 16] = bytes(16)?.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

fn parse_outside(labels: &[&[u8]]) -> Lookup {
    let n = labels.len();
    let is = |i: usize, text: &str| labels[i].eq_ignore_ascii_case(text.as_bytes());
    if n >= 2 && is(n - 1, "arpa") && is(n - 2, "in-addr") {
        let octets = &labels[..n - 2];
        if octets.len() != 4 {
            return Lookup::Reverse(None);
        }
        let mut ip = [0u8; 4];
        for (i, label) in octets.iter().rev().enumerate() {
            let Some(value) = std::str::from_utf8(label)
                .ok()
                .filter(|t| !t.is_empty() && t.len() <= 3 && t.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|t| t.parse::<u8>().ok())
            else {
                return Lookup::Reverse(None);
            };
            ip[i] = value;
        }
        return Lookup::Reverse(Some(IpAddr::V4(Ipv4Addr::from(ip))));
    }
    if n >= 2 && is(n - 1, "arpa") && is(n - 2, "ip6") {
        let nibbles = &labels[..n - 2];
        if nibbles.len() != 32 {
            return Lookup::Reverse(None);
        }
        let mut ip = [0u8; 16];
        for (i, label) in nibbles.iter().rev().enumerate() {
            let [digit] = label else {
                return Lookup::Reverse(None);
            };
            let Some(value) = (*digit as char).to_digit(16) else {
                return Lookup::Reverse(None);
            };
            ip[i / 2] |= (value as u8) << if i % 2 == 0 { 4 } else { 0 };
        }
        return Lookup::Reverse(Some(IpAddr::V6(Ipv6Addr::from(ip))));
    }
    Lookup::Outside
}

/// The reverse name of an address (`4.3.2.1.in-addr.arpa`), as PTR answers are owned.
pub fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            format!("{}.{}.{}.{}.in-addr.arpa", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(v6) => {
            let mut out = String::with_capacity(72);
            for byte in v6.octets().iter().rev() {
                out.push_str(&format!("{:x}.{:x}.", byte & 0xf, byte >> 4));
            }
            out.push_str("ip6.arpa");
            out
        }
    }
}

/// An address spelled as Consul's `<hex>.addr` label.
pub fn hex_address(ip: IpAddr) -> String {
    let bytes = match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str, qtype: u16) -> ParsedName {
        let domains = Domains::new("consul", Some("alt.example"));
        parse(&WireName::from_dotted(name).unwrap(), qtype, &domains)
    }

    fn service(service: &str, tag: Option<&str>, dc: Option<&str>) -> Lookup {
        Lookup::Service {
            service: service.into(),
            tag: tag.map(Into::into),
            datacenter: dc.map(Into::into),
        }
    }

    fn node(node: &str, dc: Option<&str>) -> Lookup {
        Lookup::Node {
            node: node.into(),
            datacenter: dc.map(Into::into),
        }
    }

    #[test]
    fn the_apex_and_service_names_with_tags_and_datacenters() {
        use rtype::A;
        assert_eq!(lookup("consul", A).lookup, Lookup::Apex);
        let cases = [
            ("Web.Service.Consul", service("web", None, None)),
            ("web.service.dc1.consul", service("web", None, Some("dc1"))),
            (
                "web.service.dc1.dc.consul",
                service("web", None, Some("dc1")),
            ),
            ("v1.web.service.consul", service("web", Some("v1"), None)),
            ("a.b.web.service.consul", service("web", Some("a.b"), None)),
        ];
        for (name, expected) in cases {
            assert_eq!(lookup(name, A).lookup, expected, "{name}");
        }
    }

    #[test]
    fn rfc_2782_service_names() {
        use rtype::SRV;
        let cases = [
            ("_web._tcp.service.consul", service("web", None, None)),
            ("_web._v1.service.consul", service("web", Some("v1"), None)),
            ("_web._tcp.consul", service("web", None, None)),
            ("_web._tcp.dc2.consul", service("web", None, Some("dc2"))),
        ];
        for (name, expected) in cases {
            assert_eq!(lookup(name, SRV).lookup, expected, "{name}");
        }
    }

    #[test]
    fn node_names_may_hold_dots() {
        use rtype::A;
        assert_eq!(lookup("n1.node.consul", A).lookup, node("n1", None));
        assert_eq!(
            lookup("n1.example.node.dc1.consul", A).lookup,
            node("n1.example", Some("dc1"))
        );
    }

    #[test]
    fn prepared_query_names() {
        let query = Lookup::PreparedQuery {
            query: "q".into(),
            datacenter: None,
        };
        assert_eq!(lookup("q.query.consul", rtype::A).lookup, query);
        assert_eq!(lookup("_q._tcp.query.consul", rtype::SRV).lookup, query);
    }

    #[test]
    fn addr_names_spell_a_whole_address_in_hex() {
        use rtype::A;
        assert_eq!(
            lookup("7f000001.addr.dc1.consul", A).lookup,
            Lookup::Addr("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            lookup("20010db8000000000000000000000001.addr.consul", A).lookup,
            Lookup::Addr("2001:db8::1".parse().unwrap())
        );
        assert_eq!(lookup("7f0000.addr.consul", A).lookup, Lookup::Invalid);
        assert_eq!(lookup("zz000001.addr.consul", A).lookup, Lookup::Invalid);
    }

    #[test]
    fn malformed_names_in_the_domain_are_invalid() {
        use rtype::A;
        assert_eq!(lookup("service.consul", A).lookup, Lookup::Invalid);
        assert_eq!(lookup("web.service.a.b.consul", A).lookup, Lookup::Invalid);
        assert_eq!(lookup("nothing.consul", A).lookup, Lookup::Invalid);
    }

    #[test]
    fn mesh_names() {
        use rtype::A;
        assert_eq!(
            lookup("web.connect.consul", A).lookup,
            Lookup::Connect {
                service: "web".into(),
                datacenter: None
            }
        );
        assert_eq!(
            lookup("web.ingress.dc2.consul", A).lookup,
            Lookup::Ingress {
                service: "web".into(),
                datacenter: Some("dc2".into())
            }
        );
        assert_eq!(lookup("a.web.ingress.consul", A).lookup, Lookup::Invalid);
        assert_eq!(lookup("web.virtual.consul", A).lookup, Lookup::Unsupported);
    }

    #[test]
    fn the_alternate_domain_and_names_outside_both() {
        use rtype::A;
        let alt = lookup("web.service.alt.example", A);
        assert_eq!(alt.lookup, service("web", None, None));
        assert_eq!(alt.domain, DomainUsed::Alternate);
        assert_eq!(lookup("example.org", A).lookup, Lookup::Outside);
        assert_eq!(lookup("consul.example.org", A).lookup, Lookup::Outside);
    }

    #[test]
    fn reverse_names() {
        let ptr = |n: &str| lookup(n, rtype::PTR).lookup;
        assert_eq!(
            ptr("1.0.0.127.in-addr.arpa"),
            Lookup::Reverse(Some("127.0.0.1".parse().unwrap()))
        );
        assert_eq!(ptr("0.127.in-addr.arpa"), Lookup::Reverse(None));
        assert_eq!(ptr("x.0.0.127.in-addr.arpa"), Lookup::Reverse(None));
        assert_eq!(ptr("256.0.0.127.in-addr.arpa"), Lookup::Reverse(None));
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(ptr(&reverse_name(v6)), Lookup::Reverse(Some(v6)));
        assert_eq!(
            reverse_name("10.1.2.3".parse().unwrap()),
            "3.2.1.10.in-addr.arpa"
        );
        assert_eq!(hex_address("10.1.2.3".parse().unwrap()), "0a010203");
    }
}
