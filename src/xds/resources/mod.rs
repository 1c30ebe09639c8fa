//! Envoy's resources for one proxy snapshot, with Consul's names and shapes: clusters
//! (`local_app`, one per upstream target named by its SNI), endpoints (EDS with health and
//! weights), listeners (`public_listener:<addr>:<port>` with inbound mTLS and intentions as
//! RBAC, one outbound listener per upstream) and routes (one per L7 upstream).
//!
//! [`build`] is pure. Each resource is encoded once, wrapped in its `Any`, and versioned by
//! the SHA-256 of its encoding (Consul's content-hash versions), so a stream decides what to
//! send by comparing versions and never re-encodes: every stream of the proxy shares the
//! same [`Resources`] behind an `Arc`.

pub mod clusters;
pub mod endpoints;
pub mod escape_hatch;
pub mod expose;
pub mod grpc;
pub mod listeners;
pub mod mesh_gateway;
pub mod prepared_query;
pub mod rbac;
pub mod routes;
pub mod terminating;

use super::registration::ProxyKind;
use super::snapshot::Snapshot;
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::google::protobuf::{Any, Duration};
use prost::{Message, Name};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub const ENDPOINT_TYPE: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
pub const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
pub const ROUTE_TYPE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

/// Consul's names.
pub const LOCAL_APP_CLUSTER: &str = "local_app";
pub const PUBLIC_LISTENER: &str = "public_listener";

/// The four resource types Consul serves, in the order it sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Cluster = 0,
    Endpoint = 1,
    Listener = 2,
    Route = 3,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Cluster,
        ResourceType::Endpoint,
        ResourceType::Listener,
        ResourceType::Route,
    ];

    pub fn type_url(self) -> &'static str {
        match self {
            ResourceType::Cluster => CLUSTER_TYPE,
            ResourceType::Endpoint => ENDPOINT_TYPE,
            ResourceType::Listener => LISTENER_TYPE,
            ResourceType::Route => ROUTE_TYPE,
        }
    }

    pub fn from_type_url(url: &str) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.type_url() == url)
    }

    /// The type Envoy keeps inside this one: a changed cluster drops its endpoints, a
    /// changed listener its routes, so those must be sent again.
    pub fn child(self) -> Option<ResourceType> {
        match self {
            ResourceType::Cluster => Some(ResourceType::Endpoint),
            ResourceType::Listener => Some(ResourceType::Route),
            _ => None,
        }
    }

    /// Whether Envoy asks for every resource of this type (a wildcard subscription).
    pub fn is_wildcard_by_default(self) -> bool {
        matches!(self, ResourceType::Cluster | ResourceType::Listener)
    }
}

/// One encoded resource.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    /// The hex SHA-256 of the encoding.
    pub version: String,
    pub any: Any,
    /// The names of this resource's children (a cluster's endpoints, a listener's routes).
    pub children: Vec<String>,
}

impl Resource {
    pub fn encode<M: Message + Name>(message: &M, children: Vec<String>) -> Arc<Resource> {
        let bytes = message.encode_to_vec();
        let version = hex(&Sha256::digest(&bytes));
        Arc::new(Resource {
            version,
            any: Any {
                type_url: M::type_url(),
                value: bytes,
            },
            children,
        })
    }
}

/// Lowercase hexadecimal of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// Every resource of one proxy, by type then name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resources {
    pub by_type: [BTreeMap<String, Arc<Resource>>; 4],
    /// What the build could not apply as configured (an escape hatch's fallback), for the
    /// watcher to log once.
    pub warnings: Vec<String>,
}

impl Resources {
    pub fn of(&self, kind: ResourceType) -> &BTreeMap<String, Arc<Resource>> {
        &self.by_type[kind as usize]
    }

    fn insert(&mut self, kind: ResourceType, name: String, resource: Arc<Resource>) {
        let previous = self.by_type[kind as usize].insert(name, resource);
        debug_assert!(previous.is_none(), "resource names are unique per type");
    }

    /// Whether every resource has the same version as in `other`.
    pub fn same_versions(&self, other: &Resources) -> bool {
        self.by_type.iter().zip(other.by_type.iter()).all(|(a, b)| {
            a.len() == b.len()
                && a.iter()
                    .zip(b.iter())
                    .all(|((na, ra), (nb, rb))| na == nb && ra.version == rb.version)
        })
    }
}

/// Builds and encodes every resource of `snapshot`.
pub fn build(snapshot: &Snapshot) -> Result<Resources, String> {
    let mut out = Resources::default();
    for (name, cluster) in clusters::build(snapshot)? {
        let children = if matches!(
            cluster.cluster_discovery_type,
            Some(envoy_types::pb::envoy::config::cluster::v3::cluster::ClusterDiscoveryType::Type(t))
                if t == envoy_types::pb::envoy::config::cluster::v3::cluster::DiscoveryType::Eds as i32
        ) {
            vec![name.clone()]
        } else {
            Vec::new()
        };
        out.insert(
            ResourceType::Cluster,
            name,
            Resource::encode(&cluster, children),
        );
    }
    for (name, cluster) in expose::clusters(snapshot) {
        out.insert(
            ResourceType::Cluster,
            name,
            Resource::encode(&cluster, Vec::new()),
        );
    }
    for (name, cluster) in terminating::clusters(snapshot)
        .into_iter()
        .chain(mesh_gateway::clusters(snapshot))
        .chain(prepared_query::clusters(snapshot))
    {
        out.insert(
            ResourceType::Cluster,
            name.clone(),
            Resource::encode(&cluster, vec![name]),
        );
    }
    for (name, assignment) in endpoints::build(snapshot)
        .into_iter()
        .chain(terminating::endpoints(snapshot))
        .chain(mesh_gateway::endpoints(snapshot))
        .chain(prepared_query::endpoints(snapshot))
    {
        out.insert(
            ResourceType::Endpoint,
            name,
            Resource::encode(&assignment, Vec::new()),
        );
    }
    for built in listeners::build(snapshot, &mut out.warnings)? {
        out.insert(
            ResourceType::Listener,
            built.listener.name.clone(),
            Resource::encode(&built.listener, built.routes),
        );
    }
    for listener in mesh_gateway::listeners(snapshot)
        .into_iter()
        .chain(expose::listeners(snapshot))
        .chain(prepared_query::listeners(snapshot))
    {
        out.insert(
            ResourceType::Listener,
            listener.name.clone(),
            Resource::encode(&listener, Vec::new()),
        );
    }
    if snapshot.kind == ProxyKind::TerminatingGateway {
        if let Some(listener) = terminating::listener(snapshot) {
            out.insert(
                ResourceType::Listener,
                listener.name.clone(),
                Resource::encode(&listener, Vec::new()),
            );
        }
    }
    for route in routes::build(snapshot)? {
        out.insert(
            ResourceType::Route,
            route.name.clone(),
            Resource::encode(&route, Vec::new()),
        );
    }
    Ok(out)
}

/// An `Any` holding `message`.
pub fn any<M: Message + Name>(message: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: message.encode_to_vec(),
    }
}

pub fn duration_ms(ms: u64) -> Duration {
    Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// A TCP socket address.
pub fn socket_address(address: &str, port: u16) -> core::Address {
    core::Address {
        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
            address: address.to_string(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(port as u32)),
            ..Default::default()
        })),
    }
}

/// Resources delivered over the ADS stream itself (Consul's `ads {}` config source).
pub fn ads_config_source() -> core::ConfigSource {
    core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
            core::AggregatedConfigSource {},
        )),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    }
}

/// A PEM text inline, as Consul hands certificates to Envoy.
pub fn inline(text: &str) -> core::DataSource {
    core::DataSource {
        specifier: Some(core::data_source::Specifier::InlineString(text.to_string())),
        ..Default::default()
    }
}

/// The proxy's leaf certificate and key, inline: what it presents in both directions.
pub fn leaf_certificate(
    snapshot: &Snapshot,
) -> envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::TlsCertificate {
    envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::TlsCertificate {
        certificate_chain: Some(inline(&snapshot.leaf_cert_pem)),
        private_key: Some(inline(&snapshot.leaf_key_pem)),
        ..Default::default()
    }
}

/// A regular expression matcher (Envoy's RE2 `safe_regex`).
pub fn safe_regex(regex: String) -> envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher {
    envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher {
        regex,
        ..Default::default()
    }
}

/// `text` with RE2's metacharacters escaped.
pub fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
