//! What the xDS server reads from its agent: a proxy's registration and its leaf
//! certificate, both decoded from the agent's own answers (`/v1/agent/service/<id>` and
//! `/v1/agent/connect/ca/leaf/<service>`, carried in-process over the agent channel).
//!
//! Reading the agent's answers rather than its internals keeps one seam between the two: a
//! proxy's registration is whatever the agent says it is, hash and all, and the same
//! decoding serves an agent that is fed by its servers. Decoding is lenient in the way the
//! agent's JSON is regular (Consul's field names, written by our own renderer) and strict
//! about what a snapshot cannot do without: a proxy kind, a port, a destination.

use serde_json::{Map, Value};

/// Most upstreams one proxy registration may declare that the xDS server will serve; past
/// it the registration is refused (a bound on the resources one snapshot builds).
pub const UPSTREAMS_PER_PROXY_MAX: usize = 512;

/// Consul's default address of an upstream listener.
pub const UPSTREAM_BIND_ADDRESS_DEFAULT: &str = "127.0.0.1";
/// Consul's default address of a public listener when the registration names none.
pub const PUBLIC_BIND_ADDRESS_DEFAULT: &str = "0.0.0.0";
/// Consul's default `local_connect_timeout_ms`.
pub const LOCAL_CONNECT_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// One upstream of a proxy registration (Consul's `Upstream`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// `service` or `prepared_query`.
    pub destination_type: String,
    pub destination_name: String,
    /// The datacenter the upstream resolves in; empty for the proxy's own.
    pub datacenter: String,
    pub bind_address: String,
    pub bind_port: u16,
    /// The upstream's opaque `Config` (`protocol`, `connect_timeout_ms`, `envoy_*`…).
    pub config: Map<String, Value>,
    /// The upstream's `MeshGateway.Mode` (empty: the proxy's, then the entries', decide).
    pub mesh_gateway_mode: String,
}

impl Upstream {
    /// Consul's upstream ID, the name of its outbound listener's first part and of its
    /// route configuration: the destination name, with `?dc=` when it names a datacenter.
    pub fn id(&self) -> String {
        let mut id = String::new();
        if self.destination_type == "prepared_query" {
            id.push_str("prepared_query:");
        }
        id.push_str(&self.destination_name);
        if !self.datacenter.is_empty() {
            id.push_str("?dc=");
            id.push_str(&self.datacenter);
        }
        id
    }
}

/// The kinds of service the xDS server configures an Envoy for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProxyKind {
    ConnectProxy,
    IngressGateway,
    TerminatingGateway,
    MeshGateway,
}

impl ProxyKind {
    /// The kind from a registration's `Kind`, or `None` for a kind the server does not
    /// configure (a typical service, an API gateway).
    pub fn from_kind(kind: &str) -> Option<ProxyKind> {
        match kind {
            "connect-proxy" => Some(ProxyKind::ConnectProxy),
            "ingress-gateway" => Some(ProxyKind::IngressGateway),
            "terminating-gateway" => Some(ProxyKind::TerminatingGateway),
            "mesh-gateway" => Some(ProxyKind::MeshGateway),
            _ => None,
        }
    }

    pub fn is_gateway(self) -> bool {
        self != ProxyKind::ConnectProxy
    }
}

/// A `connect-proxy` or gateway registration as the agent reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyRegistration {
    pub kind: ProxyKind,
    pub id: String,
    /// The proxy's own service name (`web-sidecar-proxy`).
    pub service: String,
    pub address: String,
    pub port: u16,
    /// The service the proxy acts for: a sidecar's `DestinationServiceName`, a gateway's
    /// own name (whose leaf certificate it presents and whose `service:write` its stream
    /// needs, as in Consul).
    pub destination_name: String,
    pub destination_id: String,
    pub local_address: String,
    pub local_port: u16,
    /// `Proxy.Config`: `protocol`, `bind_address`, `bind_port`, `local_connect_timeout_ms`…
    pub config: Map<String, Value>,
    pub upstreams: Vec<Upstream>,
    /// `Proxy.MeshGateway.Mode` (empty: the entries decide).
    pub mesh_gateway_mode: String,
    /// The `wan` tagged address, when the registration has one: where a mesh gateway is
    /// reached from other datacenters.
    pub wan_address: Option<(String, u16)>,
    /// A mesh gateway registered with `-expose-servers` (its `Meta` carries Consul's
    /// `consul-wan-federation = "1"`): it also routes the servers' own names for WAN
    /// federation.
    pub expose_servers: bool,
    /// The agent's `ContentHash`: a changed hash is a changed registration.
    pub content_hash: String,
    /// `Proxy.Expose`: paths served in plain text on listeners of their own.
    pub expose: super::expose::Expose,
}

/// The `Meta` key `connect envoy -expose-servers` sets on a mesh gateway, as Consul's
/// `structs.MetaWANFederationKey`.
pub const WAN_FEDERATION_META_KEY: &str = "consul-wan-federation";

fn text(object: &Map<String, Value>, key: &str) -> String {
    object
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn port(object: &Map<String, Value>, key: &str) -> Result<u16, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(value) => value
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| format!("{key} {value} is not a port")),
    }
}

/// Decodes `/v1/agent/service/<id>`'s answer.
pub fn decode_registration(body: &[u8]) -> Result<ProxyRegistration, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("bad registration: {e}"))?;
    let object = value
        .as_object()
        .ok_or_else(|| "bad registration: not an object".to_string())?;
    let kind_text = text(object, "Kind");
    let Some(kind) = ProxyKind::from_kind(&kind_text) else {
        let shown = if kind_text.is_empty() {
            "typical"
        } else {
            &kind_text
        };
        return Err(format!(
            "service {:?} is a {shown} service, not a connect-proxy or a mesh, ingress or terminating gateway",
            text(object, "ID")
        ));
    };
    let empty = Map::new();
    let proxy = object
        .get("Proxy")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let destination_name = if kind.is_gateway() {
        text(object, "Service")
    } else {
        text(proxy, "DestinationServiceName")
    };
    if destination_name.is_empty() {
        return Err("the proxy registration names no DestinationServiceName".to_string());
    }
    let raw_upstreams = proxy
        .get("Upstreams")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if raw_upstreams.len() > UPSTREAMS_PER_PROXY_MAX {
        return Err(format!(
            "the proxy declares {} upstreams; at most {UPSTREAMS_PER_PROXY_MAX} are served",
            raw_upstreams.len()
        ));
    }
    let mut upstreams = Vec::with_capacity(raw_upstreams.len());
    for raw in raw_upstreams {
        let Some(up) = raw.as_object() else {
            return Err("an upstream is not an object".to_string());
        };
        let destination_type = match text(up, "DestinationType") {
            t if t.is_empty() => "service".to_string(),
            t => t,
        };
        let bind_address = match text(up, "LocalBindAddress") {
            a if a.is_empty() => UPSTREAM_BIND_ADDRESS_DEFAULT.to_string(),
            a => a,
        };
        upstreams.push(Upstream {
            destination_type,
            destination_name: text(up, "DestinationName"),
            datacenter: text(up, "Datacenter"),
            bind_address,
            bind_port: port(up, "LocalBindPort")?,
            config: up
                .get("Config")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            mesh_gateway_mode: mesh_gateway_mode(up),
        });
    }
    let local_address = match text(proxy, "LocalServiceAddress") {
        a if a.is_empty() => "127.0.0.1".to_string(),
        a => a,
    };
    Ok(ProxyRegistration {
        kind,
        id: text(object, "ID"),
        service: text(object, "Service"),
        address: text(object, "Address"),
        port: port(object, "Port")?,
        destination_id: text(proxy, "DestinationServiceID"),
        destination_name,
        local_address,
        local_port: port(proxy, "LocalServicePort")?,
        config: proxy
            .get("Config")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        upstreams,
        mesh_gateway_mode: mesh_gateway_mode(proxy),
        wan_address: wan_address(object)?,
        expose_servers: kind == ProxyKind::MeshGateway
            && object
                .get("Meta")
                .and_then(Value::as_object)
                .is_some_and(|meta| text(meta, WAN_FEDERATION_META_KEY) == "1"),
        content_hash: text(object, "ContentHash"),
        expose: super::expose::decode(proxy)?,
    })
}

/// `MeshGateway.Mode` of a proxy or an upstream object (the agent validated it).
fn mesh_gateway_mode(object: &Map<String, Value>) -> String {
    object
        .get("MeshGateway")
        .and_then(Value::as_object)
        .map(|m| text(m, "Mode"))
        .unwrap_or_default()
}

/// The registration's `TaggedAddresses.wan`, if it names an address.
fn wan_address(object: &Map<String, Value>) -> Result<Option<(String, u16)>, String> {
    let Some(wan) = object
        .get("TaggedAddresses")
        .and_then(|t| t.get("wan"))
        .and_then(Value::as_object)
    else {
        return Ok(None);
    };
    let address = text(wan, "Address");
    if address.is_empty() {
        return Ok(None);
    }
    Ok(Some((address, port(wan, "Port")?)))
}

/// A leaf certificate and its key, as the agent serves them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafCert {
    pub cert_pem: String,
    pub private_key_pem: String,
    /// The agent's index of this leaf; a blocking read past it waits for the next one.
    pub index: u64,
}

/// Decodes `/v1/agent/connect/ca/leaf/<service>`'s answer.
pub fn decode_leaf(body: &[u8]) -> Result<LeafCert, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("bad leaf: {e}"))?;
    let object = value
        .as_object()
        .ok_or_else(|| "bad leaf: not an object".to_string())?;
    let cert_pem = text(object, "CertPEM");
    let private_key_pem = text(object, "PrivateKeyPEM");
    if cert_pem.is_empty() || private_key_pem.is_empty() {
        return Err("the leaf has no certificate or key".to_string());
    }
    Ok(LeafCert {
        cert_pem,
        private_key_pem,
        index: object
            .get("ModifyIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// A number from an opaque `Config` map, given as a number or a string (Consul decodes
/// these weakly).
pub fn config_u64(config: &Map<String, Value>, key: &str) -> Option<u64> {
    match config.get(key)? {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A string from an opaque `Config` map.
pub fn config_str<'c>(config: &'c Map<String, Value>, key: &str) -> Option<&'c str> {
    config.get(key)?.as_str().filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sidecar_registration_decodes_with_consuls_defaults() {
        let body =
            br#"{"Kind":"connect-proxy","ID":"web-sidecar-proxy","Service":"web-sidecar-proxy",
            "Port":21000,"Address":"","ContentHash":"abc",
            "Proxy":{"DestinationServiceName":"web","DestinationServiceID":"web",
                     "LocalServicePort":8080,"Config":{"protocol":"http"},
                     "Upstreams":[{"DestinationName":"db","LocalBindPort":9191}]}}"#;
        let r = decode_registration(body).unwrap();
        assert_eq!(r.destination_name, "web");
        assert_eq!(r.local_address, "127.0.0.1");
        assert_eq!((r.port, r.local_port), (21000, 8080));
        assert_eq!(r.upstreams.len(), 1);
        assert_eq!(r.upstreams[0].bind_address, "127.0.0.1");
        assert_eq!(r.upstreams[0].id(), "db");
        assert_eq!(config_str(&r.config, "protocol"), Some("http"));
    }

    #[test]
    fn a_typical_service_is_not_a_proxy() {
        let err = decode_registration(br#"{"Kind":"","ID":"web"}"#).unwrap_err();
        assert!(err.contains("not a connect-proxy"), "{err}");
        let err = decode_registration(br#"{"Kind":"api-gateway","ID":"m"}"#).unwrap_err();
        assert!(err.contains("api-gateway service"), "{err}");
        assert!(decode_registration(b"[").is_err());
        assert!(decode_registration(
            br#"{"Kind":"connect-proxy","Port":70000,
            "Proxy":{"DestinationServiceName":"web"}}"#
        )
        .unwrap_err()
        .contains("not a port"));
    }

    #[test]
    fn a_gateway_acts_for_itself() {
        let body = br#"{"Kind":"ingress-gateway","ID":"ingress","Service":"ingress",
            "Port":8443,"Address":"10.0.0.1","ContentHash":"h"}"#;
        let r = decode_registration(body).unwrap();
        assert_eq!(r.kind, ProxyKind::IngressGateway);
        assert_eq!(r.destination_name, "ingress");
        assert!(r.upstreams.is_empty());
    }

    #[test]
    fn a_mesh_gateway_carries_its_wan_address_and_modes_are_read() {
        let body = br#"{"Kind":"mesh-gateway","ID":"mgw","Service":"mesh-gateway",
            "Port":8443,"Address":"10.0.0.1","ContentHash":"h",
            "TaggedAddresses":{"lan":{"Address":"10.0.0.1","Port":8443},
                               "wan":{"Address":"198.51.100.1","Port":443}},
            "Proxy":{"MeshGateway":{"Mode":"local"}}}"#;
        let r = decode_registration(body).unwrap();
        assert_eq!(r.kind, ProxyKind::MeshGateway);
        assert_eq!(r.wan_address, Some(("198.51.100.1".to_string(), 443)));
        assert_eq!(r.mesh_gateway_mode, "local");
        let body = br#"{"Kind":"connect-proxy","ID":"p","Service":"p","Port":1,
            "Proxy":{"DestinationServiceName":"web",
                     "Upstreams":[{"DestinationName":"db","Datacenter":"dc2",
                                   "LocalBindPort":2,"MeshGateway":{"Mode":"remote"}}]}}"#;
        let r = decode_registration(body).unwrap();
        assert_eq!(r.upstreams[0].mesh_gateway_mode, "remote");
        assert_eq!(r.mesh_gateway_mode, "");
        assert_eq!(r.wan_address, None);
    }

    #[test]
    fn an_upstream_in_another_datacenter_has_consuls_id() {
        let up = Upstream {
            destination_type: "service".into(),
            destination_name: "db".into(),
            datacenter: "dc2".into(),
            bind_address: "127.0.0.1".into(),
            bind_port: 1,
            config: Map::new(),
            mesh_gateway_mode: String::new(),
        };
        assert_eq!(up.id(), "db?dc=dc2");
    }
}
