//! A proxy's configuration snapshot (Consul's `proxycfg.ConfigSnapshot`): everything one
//! `connect-proxy` needs, read from its registration, its leaf certificate and one store
//! version, as plain data the resource builders turn into Envoy's messages.
//!
//! [`build`] is a pure function of its inputs: the same registration, leaf and store version
//! give the same snapshot, so a snapshot that compares equal to the previous one needs no
//! new resources. Intentions arrive already ordered by Consul's precedence; upstreams carry
//! their compiled discovery chain with the health of every target's instances.

use super::registration::{
    config_str, config_u64, LeafCert, ProxyKind, ProxyRegistration,
    LOCAL_CONNECT_TIMEOUT_MS_DEFAULT, PUBLIC_BIND_ADDRESS_DEFAULT,
};
use super::remote::{RemoteView, MESH_GATEWAY_KIND};
use crate::consul::discovery_chain::{self, MeshGatewayMode, Overrides};
use crate::consul::filter::{self, Filter};
use crate::consul::render;
use crate::store::catalog::read::{connect_rows, proxy_destination, CheckServiceNode};
use crate::store::catalog::{InstanceView, Status};
use crate::store::gateways::{self, GatewayKind};
use crate::store::mesh::config_entry::{is_http_family, service_protocol};
use crate::store::mesh::intentions::{self, Action};
use crate::store::Tables;
use serde_json::Value;
use std::collections::BTreeMap;

/// Most endpoints one target contributes to a snapshot (a bound on one EDS resource).
pub const ENDPOINTS_PER_TARGET_MAX: usize = 4096;
/// Most intention sources one destination's RBAC is built from.
pub const INTENTION_SOURCES_MAX: usize = 8192;
/// Most services (rows of the gateway-services table) one gateway is configured for.
pub const GATEWAY_SERVICES_MAX: usize = 4096;
/// The service every server registers itself as, at its server RPC port (Consul's
/// `structs.ConsulServiceName`).
const CONSUL_SERVICE: &str = "consul";

/// What the server knows beyond the proxy: where it runs and the mesh's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdsSettings {
    pub datacenter: String,
    /// Whether a connection no intention matches is allowed (ACLs off, or the ACL default
    /// policy `allow`), as Consul's default intention policy follows the ACL default.
    pub default_allow: bool,
    /// The agent's DNS domain (`domain`) and `alt_domain`, for the names an ingress
    /// gateway's leaf carries.
    pub dns_domain: String,
    pub alt_domain: Option<String>,
    /// This agent's node name and LAN address: a sidecar's `Expose.Checks` paths are its
    /// destination's checks on this node, and take connections from this address.
    pub node_name: String,
    pub advertise_address: String,
}

/// One intention source as the RBAC builders see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentionSource {
    /// The source service name, or `*`.
    pub name: String,
    pub rule: SourceRule,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceRule {
    /// An L4 intention.
    Action(Action),
    /// An L7 intention's `Permissions`, in order: the first that matches decides.
    Permissions(Vec<HttpPermission>),
}

/// One L7 permission: its action and what a request must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpPermission {
    pub allow: bool,
    pub path_exact: String,
    pub path_prefix: String,
    pub path_regex: String,
    pub methods: Vec<String>,
    pub headers: Vec<HeaderMatch>,
}

/// One header condition of a permission or a route (`Present`, `Exact`, `Prefix`,
/// `Suffix`, `Regex`, inverted by `Invert`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderMatch {
    pub name: String,
    pub present: bool,
    pub exact: String,
    pub prefix: String,
    pub suffix: String,
    pub regex: String,
    pub invert: bool,
}

/// The inbound side: the public listener and the local application behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inbound {
    pub bind_address: String,
    pub bind_port: u16,
    pub local_address: String,
    pub local_port: u16,
    pub local_connect_timeout_ms: u64,
    pub protocol: String,
    pub default_allow: bool,
    /// The destination's intentions, highest precedence first.
    pub sources: Vec<IntentionSource>,
}

/// One endpoint of a target: a proxy (or Connect-native instance) of the target service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub address: String,
    pub port: u16,
    pub healthy: bool,
    pub weight: u32,
}

/// Where a resolver sends traffic: a service (subset) in a datacenter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub id: String,
    pub service: String,
    pub subset: String,
    pub datacenter: String,
    /// Consul's SNI, also the name of the target's cluster.
    pub sni: String,
    /// The SPIFFE ID its proxies' certificates carry.
    pub spiffe_id: String,
    pub connect_timeout_ms: u64,
    /// How the target is reached when it is in another datacenter (its chain's
    /// `MeshGateway.Mode`: `local`, `remote`, else straight to its proxies).
    pub mesh_gateway_mode: String,
    pub endpoints: Vec<Endpoint>,
}

/// A node of a compiled discovery chain.
#[derive(Clone, Debug, PartialEq)]
pub enum ChainNode {
    Router(Vec<RouteRule>),
    Splitter(Vec<Split>),
    Resolver {
        target: String,
        failover: Vec<String>,
    },
}

/// One route of a `service-router`, Consul's catch-all last.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteRule {
    pub path_exact: String,
    pub path_prefix: String,
    pub path_regex: String,
    pub methods: Vec<String>,
    pub headers: Vec<HeaderMatch>,
    pub query_params: Vec<(String, String)>,
    pub prefix_rewrite: String,
    pub request_timeout_ms: u64,
    pub num_retries: u32,
    pub retry_on_connect_failure: bool,
    pub retry_on_status_codes: Vec<u32>,
    pub next: String,
}

/// One split of a `service-splitter`: a weight in percent and the node it leads to.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub weight: f64,
    pub next: String,
}

/// An upstream with its compiled chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Upstream {
    /// Consul's upstream ID (`db`, `db?dc=dc2`).
    pub id: String,
    pub destination: String,
    pub datacenter: String,
    pub bind_address: String,
    pub bind_port: u16,
    pub protocol: String,
    pub start: String,
    pub nodes: BTreeMap<String, ChainNode>,
    pub targets: BTreeMap<String, Target>,
    /// The circuit breakers and outlier detection of its clusters (an ingress gateway's
    /// entry sets them; a sidecar's upstreams keep Envoy's defaults).
    pub limits: UpstreamLimits,
    /// A sidecar upstream's escape hatches, kept only while its discovery chain is the
    /// default one (Consul ignores them for a configured chain).
    pub escape_hatches: UpstreamEscapeHatches,
}

/// An upstream's Envoy escape hatches from its `Config`: Envoy JSON replacing its listener
/// (`envoy_listener_json`) or its cluster (`envoy_cluster_json`), decoded by the resource
/// builders.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamEscapeHatches {
    pub listener_json: Option<String>,
    pub cluster_json: Option<String>,
}

impl UpstreamEscapeHatches {
    fn of(config: &serde_json::Map<String, Value>) -> UpstreamEscapeHatches {
        use super::resources::escape_hatch::{UPSTREAM_CLUSTER_KEY, UPSTREAM_LISTENER_KEY};
        UpstreamEscapeHatches {
            listener_json: config_str(config, UPSTREAM_LISTENER_KEY).map(str::to_string),
            cluster_json: config_str(config, UPSTREAM_CLUSTER_KEY).map(str::to_string),
        }
    }
}

/// A sidecar's Envoy escape hatches from its `Proxy.Config`: Envoy JSON replacing the public
/// listener or `local_app`, and the tracing of its HTTP connection managers, decoded by the
/// resource builders.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyEscapeHatches {
    pub public_listener_json: Option<String>,
    pub local_cluster_json: Option<String>,
    pub listener_tracing_json: Option<String>,
}

impl ProxyEscapeHatches {
    fn of(config: &serde_json::Map<String, Value>) -> ProxyEscapeHatches {
        use super::resources::escape_hatch::{
            LISTENER_TRACING_KEY, LOCAL_CLUSTER_KEY, PUBLIC_LISTENER_KEY,
        };
        let key = |k| config_str(config, k).map(str::to_string);
        ProxyEscapeHatches {
            public_listener_json: key(PUBLIC_LISTENER_KEY),
            local_cluster_json: key(LOCAL_CLUSTER_KEY),
            listener_tracing_json: key(LISTENER_TRACING_KEY),
        }
    }
}

/// An ingress service's limits, as Consul's `configIngressUpstreamCluster` gives its
/// clusters: the entry's `Defaults`, overridden by the service's own settings; zero or
/// `None` leaves Envoy's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamLimits {
    pub max_connections: u32,
    pub max_pending_requests: u32,
    /// `MaxConcurrentRequests`, Envoy's `max_requests`.
    pub max_requests: u32,
    pub outlier: OutlierSettings,
}

/// Consul's `PassiveHealthCheck` as Envoy's outlier detection; each `None` is Envoy's
/// default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutlierSettings {
    pub interval_ms: Option<u64>,
    /// `MaxFailures`, Envoy's `consecutive_5xx`.
    pub consecutive_5xx: Option<u32>,
    pub enforcing_consecutive_5xx: Option<u32>,
    pub max_ejection_percent: Option<u32>,
    pub base_ejection_time_ms: Option<u64>,
}

impl UpstreamLimits {
    /// The limits of an ingress service: `defaults` (the entry's `Defaults`) with
    /// `service`'s own settings over them, as Consul merges them.
    fn ingress(defaults: &Value, service: Option<&Value>) -> UpstreamLimits {
        let mut limits = UpstreamLimits::default();
        for layer in std::iter::once(defaults).chain(service) {
            for (key, slot) in [
                ("MaxConnections", &mut limits.max_connections),
                ("MaxPendingRequests", &mut limits.max_pending_requests),
                ("MaxConcurrentRequests", &mut limits.max_requests),
            ] {
                let value = layer[key].as_u64().unwrap_or(0);
                if value > 0 {
                    *slot = u32::try_from(value).unwrap_or(u32::MAX);
                }
            }
            let check = &layer["PassiveHealthCheck"];
            let outlier = &mut limits.outlier;
            let count = |key: &str| {
                check[key]
                    .as_u64()
                    .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
            };
            if millis(&check["Interval"]) > 0 {
                outlier.interval_ms = Some(millis(&check["Interval"]));
            }
            if let Some(n) = count("MaxFailures").filter(|n| *n > 0) {
                outlier.consecutive_5xx = Some(n);
            }
            // Envoy refuses a zero here for an ingress gateway's clusters, so Consul sends
            // only a positive one.
            if let Some(n) = count("EnforcingConsecutive5xx").filter(|n| *n > 0) {
                outlier.enforcing_consecutive_5xx = Some(n);
            }
            if let Some(n) = count("MaxEjectionPercent") {
                outlier.max_ejection_percent = Some(n);
            }
            if !check["BaseEjectionTime"].is_null() {
                outlier.base_ejection_time_ms = Some(millis(&check["BaseEjectionTime"]));
            }
        }
        limits
    }
}

/// One listener of an ingress gateway (a listener of its `ingress-gateway` entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressListener {
    pub bind_address: String,
    pub port: u16,
    /// `tcp`, `http`, `http2` or `grpc`.
    pub protocol: String,
    /// The services it exposes, in name order.
    pub services: Vec<IngressService>,
    /// The TLS it ends with the gateway's leaf, when enabled for it (the entry's `TLS`
    /// merged with the listener's, as Consul resolves them).
    pub tls: Option<IngressTls>,
}

/// An ingress listener's TLS settings, in Consul's names (`TLSv1_2`,
/// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`); empty means Envoy's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressTls {
    pub min_version: String,
    pub max_version: String,
    pub cipher_suites: Vec<String>,
}

/// One service an ingress listener exposes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressService {
    /// The ID of its upstream in [`Snapshot::upstreams`] (the service's name).
    pub upstream: String,
    /// The `Host` values that reach it on an HTTP listener: the entry's `Hosts`, else
    /// Consul's `<service>.ingress.*`, each also with the listener's port.
    pub domains: Vec<String>,
    /// The entry's `RequestHeaders` and `ResponseHeaders` for the service (its own, else the
    /// listener's wildcard service's), applied on its virtual host.
    pub request_headers: HeaderChanges,
    pub response_headers: HeaderChanges,
}

/// Consul's `HTTPHeaderModifiers`: headers added (appended to any already there), set
/// (replacing them) and removed, each list in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderChanges {
    pub add: Vec<(String, String)>,
    pub set: Vec<(String, String)>,
    pub remove: Vec<String>,
}

impl HeaderChanges {
    fn from_entry(value: &Value) -> HeaderChanges {
        let pairs = |key: &str| -> Vec<(String, String)> {
            value[key]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        };
        HeaderChanges {
            add: pairs("Add"),
            set: pairs("Set"),
            remove: strs(&value["Remove"]),
        }
    }
}

/// One service a terminating gateway links: the gateway ends the mesh's mTLS with the
/// service's own leaf, decides by its intentions, and carries the bytes to its instances
/// outside the mesh, in plain TCP or TLS it originates with the entry's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminatingService {
    pub name: String,
    /// The SNI sidecars send for the service, also its cluster's name.
    pub sni: String,
    pub leaf_cert_pem: String,
    pub leaf_key_pem: String,
    /// The service's intentions, highest precedence first.
    pub sources: Vec<IntentionSource>,
    /// The entry's TLS origination settings (`CAFile`, `CertFile`, `KeyFile`, `SNI`);
    /// plain TCP when `ca_file` is empty.
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
    pub tls_sni: String,
    /// The service's instances (its own addresses, outside the mesh).
    pub endpoints: Vec<Endpoint>,
}

/// One listener of a mesh gateway: Consul's `default` at the registration's address, and
/// `wan` at its WAN address when that is another socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayListener {
    pub name: String,
    pub address: String,
    pub port: u16,
}

/// A cluster a mesh gateway routes to by SNI, without terminating TLS: a local service (or
/// one of its resolver's subsets) at its Connect-capable instances, or another datacenter
/// at its mesh gateways.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayCluster {
    /// The cluster's name: the service's SNI, or `<datacenter>.internal.<trust domain>`.
    pub name: String,
    pub endpoints: Vec<Endpoint>,
}

/// What a mesh gateway routes (Consul's `configSnapshotMeshGateway`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeshGatewayRoutes {
    pub listeners: Vec<GatewayListener>,
    /// The local services and subsets, by SNI.
    pub services: Vec<GatewayCluster>,
    /// The other datacenters, by name, each with the wildcard SNI that reaches it.
    pub datacenters: Vec<(String, GatewayCluster)>,
    /// With `-expose-servers` (WAN federation through mesh gateways): this datacenter's
    /// servers, one cluster each named `<node>.server.<datacenter>.<domain>` (Consul's
    /// `ServerSNI`) at its server RPC port, in name order; empty otherwise.
    pub servers: Vec<GatewayCluster>,
    /// With `-expose-servers`: each other datacenter's servers as one cluster
    /// `server.<datacenter>.<domain>` whose endpoints are that datacenter's gateways, by
    /// datacenter name; empty otherwise.
    pub server_datacenters: Vec<(String, GatewayCluster)>,
    /// With `-expose-servers`: every server of this datacenter as one cluster
    /// `server.<datacenter>.<domain>` (Consul's catch-all), which a server of another
    /// datacenter that knows no server by name (a secondary joining its primary) reaches
    /// through the SNI fallback chain; `None` otherwise or without servers.
    pub any_server: Option<GatewayCluster>,
}

/// Everything a `connect-proxy` or a gateway is configured from.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub kind: ProxyKind,
    pub proxy_id: String,
    pub service: String,
    pub destination: String,
    pub datacenter: String,
    pub trust_domain: String,
    pub leaf_cert_pem: String,
    pub leaf_key_pem: String,
    /// Every trusted root, PEM, active first.
    pub roots_pem: Vec<String>,
    /// A sidecar's public listener; a gateway's has port 0 (no such listener).
    pub inbound: Inbound,
    /// A sidecar's upstreams, or the services an ingress gateway exposes (without a bind
    /// port of their own: the gateway's listeners are [`Snapshot::ingress`]).
    pub upstreams: Vec<Upstream>,
    pub ingress: Vec<IngressListener>,
    /// The services a terminating gateway links, in name order, each once its leaf is
    /// signed; the gateway listens on `inbound`'s address and port.
    pub terminating: Vec<TerminatingService>,
    /// A mesh gateway's listeners and clusters.
    pub mesh: MeshGatewayRoutes,
    /// Settings of the gateway's config entry that praetor accepts but does not apply yet
    /// (`Listeners[0].TLS`, …), for the watcher to warn about.
    pub unapplied: Vec<String>,
    /// A sidecar's exposed paths (`Proxy.Expose.Paths`, then its checks'), each a
    /// plain-text listener.
    pub expose: Vec<super::expose::ExposePath>,
    /// `Proxy.Expose.Checks`: the paths include the destination's checks, read from its
    /// instance on this node (which a client agent's mirror must therefore follow).
    pub exposes_checks: bool,
    /// A sidecar's prepared-query upstreams, each executed against the store version.
    pub prepared_queries: Vec<super::prepared_query::QueryUpstream>,
    /// A sidecar's escape hatches (a gateway's are not applied: Consul's gateways read
    /// none of them).
    pub escape_hatches: ProxyEscapeHatches,
}

impl Snapshot {
    /// The roots as one PEM bundle, as Envoy's `trusted_ca` takes them.
    pub fn roots_bundle(&self) -> String {
        let mut bundle = String::new();
        for pem in &self.roots_pem {
            bundle.push_str(pem.trim_end());
            bundle.push('\n');
        }
        bundle
    }
}

/// The SPIFFE ID of `service`'s certificates in `datacenter`.
pub fn spiffe_id(trust_domain: &str, datacenter: &str, service: &str) -> String {
    format!("spiffe://{trust_domain}/ns/default/dc/{datacenter}/svc/{service}")
}

/// Builds the snapshot of `registration` from its leaf and one store version;
/// `service_leaves` are the leaves of the services a terminating gateway links, by name as
/// its entry spells them; `remote` what is known of other datacenters.
pub fn build(
    registration: &ProxyRegistration,
    leaf: &LeafCert,
    service_leaves: &BTreeMap<String, LeafCert>,
    tables: &Tables,
    settings: &XdsSettings,
    remote: &RemoteView,
) -> Result<Snapshot, String> {
    let ca = &tables.mesh.ca;
    let trust_domain = ca
        .trust_domain()
        .ok_or_else(|| "the Connect CA is not initialized yet".to_string())?;
    let roots_pem = roots_active_first(ca);
    let destination = registration.destination_name.clone();
    if registration.kind.is_gateway() {
        return build_gateway(
            registration,
            (leaf, service_leaves),
            (tables, remote),
            settings,
            trust_domain,
            roots_pem,
        );
    }
    let inbound = sidecar_inbound(registration, tables, settings)?;
    let mut unapplied = Vec::new();
    let upstreams = sidecar_upstreams(
        registration,
        (tables, remote),
        settings,
        &trust_domain,
        &mut unapplied,
    )?;
    let prepared_queries: Vec<_> = registration
        .upstreams
        .iter()
        .filter(|u| u.destination_type == "prepared_query")
        .map(|u| super::prepared_query::build(tables, u, &settings.datacenter, &trust_domain))
        .collect();
    unapplied.extend(
        prepared_queries
            .iter()
            .filter(|q| !q.unserved.is_empty())
            .map(|q| format!("upstream {:?}: {}", q.id, q.unserved)),
    );
    Ok(Snapshot {
        kind: registration.kind,
        proxy_id: registration.id.clone(),
        service: registration.service.clone(),
        destination,
        datacenter: settings.datacenter.clone(),
        trust_domain,
        leaf_cert_pem: leaf.cert_pem.clone(),
        leaf_key_pem: leaf.private_key_pem.clone(),
        roots_pem,
        inbound,
        upstreams,
        ingress: Vec::new(),
        terminating: Vec::new(),
        mesh: MeshGatewayRoutes::default(),
        unapplied,
        expose: exposed_paths(registration, tables, settings),
        exposes_checks: registration.expose.checks,
        prepared_queries,
        escape_hatches: ProxyEscapeHatches::of(&registration.config),
    })
}

/// A sidecar's exposed paths: its registration's `Expose.Paths`, then, with
/// `Expose.Checks`, one per check of its destination the agent gave a listener port.
fn exposed_paths(
    registration: &ProxyRegistration,
    tables: &Tables,
    settings: &XdsSettings,
) -> Vec<super::expose::ExposePath> {
    let mut paths = registration.expose.paths.clone();
    if registration.expose.checks {
        paths.extend(super::expose::check_paths(
            tables,
            &settings.node_name,
            &registration.destination_id,
            &settings.advertise_address,
        ));
    }
    paths.truncate(super::expose::EXPOSE_PATHS_MAX);
    paths
}

/// The CA's root certificates, the active one first.
fn roots_active_first(ca: &crate::store::mesh::ca::CaState) -> Vec<String> {
    let mut roots_pem: Vec<String> = Vec::with_capacity(ca.roots.len());
    if let Some(active) = ca.active_root() {
        roots_pem.push(active.root_cert_pem.to_string());
    }
    for root in ca.roots.iter().filter(|r| !r.active) {
        roots_pem.push(root.root_cert_pem.to_string());
    }
    roots_pem
}

/// A sidecar's public listener: where it binds (its `bind_address`/`bind_port` config, else
/// the registration's), the local application it forwards to, and the intentions toward
/// its destination.
fn sidecar_inbound(
    registration: &ProxyRegistration,
    tables: &Tables,
    settings: &XdsSettings,
) -> Result<Inbound, String> {
    let destination = &registration.destination_name;
    let protocol = config_str(&registration.config, "protocol")
        .map(str::to_string)
        .unwrap_or_else(|| service_protocol(tables, destination).to_string());
    Ok(Inbound {
        bind_address: config_str(&registration.config, "bind_address")
            .map(str::to_string)
            .or_else(|| Some(registration.address.clone()).filter(|a| !a.is_empty()))
            .unwrap_or_else(|| PUBLIC_BIND_ADDRESS_DEFAULT.to_string()),
        bind_port: config_u64(&registration.config, "bind_port")
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(registration.port),
        local_address: registration.local_address.clone(),
        local_port: registration.local_port,
        local_connect_timeout_ms: config_u64(&registration.config, "local_connect_timeout_ms")
            .unwrap_or(LOCAL_CONNECT_TIMEOUT_MS_DEFAULT),
        protocol,
        default_allow: settings.default_allow,
        sources: intention_sources(tables, destination)?,
    })
}

/// A sidecar's service upstreams, each with its discovery chain compiled.
fn sidecar_upstreams(
    registration: &ProxyRegistration,
    (tables, remote): (&Tables, &RemoteView),
    settings: &XdsSettings,
    trust_domain: &str,
    unapplied: &mut Vec<String>,
) -> Result<Vec<Upstream>, String> {
    let mut upstreams = Vec::with_capacity(registration.upstreams.len());
    for upstream in &registration.upstreams {
        if upstream.destination_type != "service" {
            // Prepared-query upstreams resolve through the query's own failover; they are
            // left out until the snapshot executes queries.
            continue;
        }
        let datacenter = if upstream.datacenter.is_empty() {
            settings.datacenter.clone()
        } else {
            upstream.datacenter.clone()
        };
        let overrides = Overrides {
            connect_timeout_ns: config_u64(&upstream.config, "connect_timeout_ms")
                .map(|ms| ms as i64 * 1_000_000),
            protocol: config_str(&upstream.config, "protocol").map(str::to_string),
            // The upstream's `MeshGateway` wins over the proxy's, as Consul's proxycfg
            // passes them; the agent validated both spellings.
            mesh_gateway: MeshGatewayMode::parse(&upstream.mesh_gateway_mode)
                .unwrap_or_default()
                .or(MeshGatewayMode::parse(&registration.mesh_gateway_mode).unwrap_or_default()),
        };
        let (mut compiled, default_chain) = compile_upstream(
            (tables, remote),
            settings,
            trust_domain,
            UpstreamSpec {
                id: upstream.id(),
                destination: &upstream.destination_name,
                datacenter,
                overrides,
                bind_address: upstream.bind_address.clone(),
                bind_port: upstream.bind_port,
            },
        )?;
        let hatches = UpstreamEscapeHatches::of(&upstream.config);
        if default_chain {
            compiled.escape_hatches = hatches;
        } else {
            // Consul's words when a chain's config entries (or the upstream's own protocol
            // or connect timeout) already shape what the hatch would replace.
            for (key, set) in [
                ("envoy_listener_json", hatches.listener_json.is_some()),
                ("envoy_cluster_json", hatches.cluster_json.is_some()),
            ] {
                if set {
                    unapplied.push(format!(
                        "upstream {:?}: ignoring escape hatch setting {key}, because a discovery chain is configured for {:?}",
                        compiled.id, compiled.destination
                    ));
                }
            }
        }
        upstreams.push(compiled);
    }
    Ok(upstreams)
}

/// What an upstream is compiled from.
struct UpstreamSpec<'a> {
    id: String,
    destination: &'a str,
    datacenter: String,
    overrides: Overrides,
    bind_address: String,
    bind_port: u16,
}

/// An upstream with its discovery chain compiled against `tables`, its targets in other
/// datacenters reached as `remote` shows them, and whether that chain is the default one
/// (Consul's `Default`: no config entry, override or protocol shapes it).
fn compile_upstream(
    (tables, remote): (&Tables, &RemoteView),
    settings: &XdsSettings,
    trust_domain: &str,
    spec: UpstreamSpec<'_>,
) -> Result<(Upstream, bool), String> {
    let chain = discovery_chain::compile(
        tables,
        spec.destination,
        &spec.datacenter,
        &settings.datacenter,
        spec.overrides,
    )
    .map_err(|e| format!("upstream {:?}: {e}", spec.destination))?;
    let chain: Value = serde_json::from_str(&chain.to_json())
        .map_err(|e| format!("upstream {:?}: {e}", spec.destination))?;
    let chain = &chain["Chain"];
    let (nodes, targets) =
        chain_parts(chain, (tables, remote), trust_domain, &settings.datacenter)?;
    let default_chain = chain["Default"].as_bool().unwrap_or(false);
    let upstream = Upstream {
        id: spec.id,
        destination: spec.destination.to_string(),
        datacenter: spec.datacenter,
        bind_address: spec.bind_address,
        bind_port: spec.bind_port,
        protocol: chain["Protocol"].as_str().unwrap_or("tcp").to_string(),
        start: chain["StartNode"].as_str().unwrap_or_default().to_string(),
        nodes,
        targets,
        limits: UpstreamLimits::default(),
        escape_hatches: UpstreamEscapeHatches::default(),
    };
    Ok((upstream, default_chain))
}

/// Consul's default `Host` of a service behind an ingress gateway, whatever the domain.
fn ingress_default_host(service: &str) -> String {
    format!("{service}.ingress.*")
}

/// The `Host` values an ingress listener on `port` answers for a service with `hosts`:
/// those, else Consul's default, and each without a port also with the listener's (a
/// client puts the port in `Host` unless it is the scheme's own).
pub fn ingress_domains(service: &str, hosts: &[String], port: u16) -> Vec<String> {
    let mut domains: Vec<String> = if hosts.is_empty() {
        vec![ingress_default_host(service)]
    } else {
        hosts.to_vec()
    };
    let with_ports: Vec<String> = domains
        .iter()
        .filter(|h| !has_port(h))
        .map(|h| format!("{h}:{port}"))
        .collect();
    for domain in with_ports {
        if !domains.contains(&domain) {
            domains.push(domain);
        }
    }
    domains
}

/// Whether a host (`name`, `name:port`, `[v6]:port`) carries a port.
fn has_port(host: &str) -> bool {
    match host.rsplit_once(':') {
        None => false,
        Some((name, port)) => {
            !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']'))
        }
    }
}

/// The snapshot of a gateway: no public listener, and for an ingress gateway one listener
/// per listener of its entry with the chains of the services each exposes, read from the
/// gateway-services rows (which already expand a wildcard).
fn build_gateway(
    registration: &ProxyRegistration,
    (leaf, service_leaves): (&LeafCert, &BTreeMap<String, LeafCert>),
    (tables, remote): (&Tables, &RemoteView),
    settings: &XdsSettings,
    trust_domain: String,
    roots_pem: Vec<String>,
) -> Result<Snapshot, String> {
    let bind_address = Some(registration.address.clone())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| PUBLIC_BIND_ADDRESS_DEFAULT.to_string());
    let (upstreams, ingress) = if registration.kind == ProxyKind::IngressGateway {
        let context = (tables, remote, settings, trust_domain.as_str());
        ingress_parts(context, &registration.service, &bind_address)?
    } else {
        (Vec::new(), Vec::new())
    };
    let terminating = if registration.kind == ProxyKind::TerminatingGateway {
        terminating_parts(
            tables,
            settings,
            &trust_domain,
            &registration.service,
            service_leaves,
        )?
    } else {
        Vec::new()
    };
    let mesh = if registration.kind == ProxyKind::MeshGateway {
        mesh_gateway_routes(registration, tables, remote, settings, &trust_domain)?
    } else {
        MeshGatewayRoutes::default()
    };
    Ok(Snapshot {
        kind: registration.kind,
        proxy_id: registration.id.clone(),
        service: registration.service.clone(),
        destination: registration.destination_name.clone(),
        datacenter: settings.datacenter.clone(),
        trust_domain,
        leaf_cert_pem: leaf.cert_pem.clone(),
        leaf_key_pem: leaf.private_key_pem.clone(),
        roots_pem,
        inbound: Inbound {
            bind_address,
            // A terminating gateway's one listener takes the registration's port.
            bind_port: if registration.kind == ProxyKind::TerminatingGateway {
                registration.port
            } else {
                0
            },
            local_address: String::new(),
            local_port: 0,
            local_connect_timeout_ms: LOCAL_CONNECT_TIMEOUT_MS_DEFAULT,
            protocol: "tcp".to_string(),
            default_allow: settings.default_allow,
            sources: Vec::new(),
        },
        upstreams,
        ingress,
        terminating,
        mesh,
        unapplied: if registration.kind == ProxyKind::IngressGateway {
            ingress_unapplied(tables, &registration.service)
        } else {
            Vec::new()
        },
        expose: Vec::new(),
        exposes_checks: false,
        prepared_queries: Vec::new(),
        escape_hatches: ProxyEscapeHatches::default(),
    })
}

/// What an ingress gateway's parts are compiled from: the tables, the other datacenters'
/// view, the settings and the trust domain.
type GatewayContext<'a> = (&'a Tables, &'a RemoteView, &'a XdsSettings, &'a str);

/// An ingress gateway's upstreams (one per exposed service) and listeners (one per port of
/// its entry, sorted by port), read from the gateway-services rows (which already expand a
/// wildcard).
fn ingress_parts(
    (tables, remote, settings, trust_domain): GatewayContext<'_>,
    gateway: &str,
    bind_address: &str,
) -> Result<(Vec<Upstream>, Vec<IngressListener>), String> {
    let entry = ingress_entry(tables, gateway);
    let rows = gateways::gateway_rows(tables, gateway);
    if rows.len() > GATEWAY_SERVICES_MAX {
        return Err(format!(
            "gateway {gateway:?} links {} services; at most {GATEWAY_SERVICES_MAX} are served",
            rows.len()
        ));
    }
    let mut upstreams: Vec<Upstream> = Vec::new();
    let mut ingress: Vec<IngressListener> = Vec::new();
    for row in rows {
        if row.gateway_kind != GatewayKind::Ingress {
            continue;
        }
        let service = row.service.to_string();
        let config = entry
            .as_ref()
            .and_then(|e| ingress_service_config(e, row.port as i64, &service));
        if !upstreams.iter().any(|u| u.id == service) {
            // A service behind two listeners has one set of clusters: the first
            // listener's (by port) settings give their limits.
            let defaults = entry.as_ref().map_or(&Value::Null, |e| &e["Defaults"]);
            let spec = UpstreamSpec {
                id: service.clone(),
                destination: &service,
                datacenter: settings.datacenter.clone(),
                overrides: Overrides::default(),
                bind_address: bind_address.to_string(),
                bind_port: 0,
            };
            let (mut upstream, _) =
                compile_upstream((tables, remote), settings, trust_domain, spec)?;
            upstream.limits = UpstreamLimits::ingress(defaults, config);
            upstreams.push(upstream);
        }
        let hosts: Vec<String> = row.hosts.iter().map(|h| h.to_string()).collect();
        let exposed = IngressService {
            domains: ingress_domains(&service, &hosts, row.port),
            request_headers: config
                .map(|c| HeaderChanges::from_entry(&c["RequestHeaders"]))
                .unwrap_or_default(),
            response_headers: config
                .map(|c| HeaderChanges::from_entry(&c["ResponseHeaders"]))
                .unwrap_or_default(),
            upstream: service,
        };
        match ingress.iter_mut().find(|l| l.port == row.port) {
            Some(listener) => listener.services.push(exposed),
            None => ingress.push(IngressListener {
                bind_address: bind_address.to_string(),
                port: row.port,
                protocol: row.protocol.to_string(),
                services: vec![exposed],
                tls: entry
                    .as_ref()
                    .and_then(|e| listener_tls(e, row.port as i64)),
            }),
        }
    }
    ingress.sort_by_key(|l| l.port);
    Ok((upstreams, ingress))
}

/// A terminating gateway's services: each with its own leaf, the intentions toward it,
/// the TLS files its row names and its external endpoints.
fn terminating_parts(
    tables: &Tables,
    settings: &XdsSettings,
    trust_domain: &str,
    gateway: &str,
    service_leaves: &BTreeMap<String, LeafCert>,
) -> Result<Vec<TerminatingService>, String> {
    let mut terminating = Vec::new();
    for name in terminating_services(tables, gateway)? {
        // A service whose leaf is not signed yet is left out until it is, as Consul
        // waits for it.
        let Some(service_leaf) = service_leaves.get(&name) else {
            continue;
        };
        let row = gateways::gateway_rows(tables, gateway)
            .into_iter()
            .find(|r| r.gateway_kind == GatewayKind::Terminating && *r.service == *name)
            .expect("terminating_services lists the gateway's rows");
        terminating.push(TerminatingService {
            sni: format!(
                "{name}.default.{}.internal.{trust_domain}",
                settings.datacenter
            ),
            leaf_cert_pem: service_leaf.cert_pem.clone(),
            leaf_key_pem: service_leaf.private_key_pem.clone(),
            sources: intention_sources(tables, &name)?,
            ca_file: row.ca_file.to_string(),
            cert_file: row.cert_file.to_string(),
            key_file: row.key_file.to_string(),
            tls_sni: row.sni.to_string(),
            endpoints: external_endpoints(tables, &name),
            name,
        });
    }
    Ok(terminating)
}

/// Whether a setting says anything: a rendered default (`"TLS": {"Enabled": false}`, a zero
/// limit, an empty list) does not.
fn set(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(items) => items.iter().any(set),
        Value::Object(fields) => fields.values().any(set),
        Value::Bool(true) => true,
    }
}

/// The `ingress-gateway` entry of `gateway`, as JSON.
fn ingress_entry(tables: &Tables, gateway: &str) -> Option<Value> {
    use crate::store::mesh::config_entry::{get, ConfigKind, EntryBody};
    let entry = get(tables, ConfigKind::IngressGateway, gateway)?;
    let EntryBody::Json(text) = &entry.body else {
        return None;
    };
    serde_json::from_str::<Value>(text).ok()
}

/// The TLS the listener on `port` of an ingress entry ends, if enabled: the entry's `TLS`
/// with the listener's `TLS` over it (its `Enabled` always, its versions and cipher suites
/// when set), as Consul's `resolveListenerTLSConfig` merges them.
fn listener_tls(entry: &Value, port: i64) -> Option<IngressTls> {
    let gateway = &entry["TLS"];
    let mut enabled = gateway["Enabled"].as_bool().unwrap_or(false);
    let mut tls = IngressTls {
        min_version: field(gateway, "TLSMinVersion"),
        max_version: field(gateway, "TLSMaxVersion"),
        cipher_suites: strs(&gateway["CipherSuites"]),
    };
    let listener = entry["Listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["Port"].as_i64() == Some(port))?;
    let own = &listener["TLS"];
    if own.is_object() {
        enabled = own["Enabled"].as_bool().unwrap_or(false);
        for (key, slot) in [
            ("TLSMinVersion", &mut tls.min_version),
            ("TLSMaxVersion", &mut tls.max_version),
        ] {
            let value = field(own, key);
            if !value.is_empty() {
                *slot = value;
            }
        }
        let suites = strs(&own["CipherSuites"]);
        if !suites.is_empty() {
            tls.cipher_suites = suites;
        }
    }
    enabled.then_some(tls)
}

/// The entry's settings of `service` on the listener on `port`: its own, else the
/// listener's wildcard service's, as Consul's `findIngressServiceMatchingUpstream` finds
/// them.
fn ingress_service_config<'a>(entry: &'a Value, port: i64, service: &str) -> Option<&'a Value> {
    let listener = entry["Listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["Port"].as_i64() == Some(port))?;
    let services = listener["Services"].as_array()?;
    services
        .iter()
        .find(|s| s["Name"].as_str() == Some(service))
        .or_else(|| services.iter().find(|s| s["Name"].as_str() == Some("*")))
}

/// Whether the entry ends TLS on any listener.
fn ingress_tls_enabled(entry: &Value) -> bool {
    entry["TLS"]["Enabled"].as_bool() == Some(true)
        || entry["Listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|l| l["TLS"]["Enabled"].as_bool() == Some(true))
}

/// The DNS names an ingress gateway's leaf carries beyond Consul's own, when its entry
/// ends TLS (Consul's `generateIngressDNSSANs`): `*.ingress.<domain>` and
/// `*.ingress.<datacenter>.<domain>` (and the same under `alt_domain`), which cover every
/// `<service>.ingress…` default host, and every `Hosts` value of its services. Sorted,
/// each once; none without TLS.
pub fn ingress_dns_sans(tables: &Tables, gateway: &str, settings: &XdsSettings) -> Vec<String> {
    let Some(entry) = ingress_entry(tables, gateway) else {
        return Vec::new();
    };
    if !ingress_tls_enabled(&entry) {
        return Vec::new();
    }
    let rows: Vec<_> = gateways::gateway_rows(tables, gateway)
        .into_iter()
        .filter(|r| r.gateway_kind == GatewayKind::Ingress)
        .take(GATEWAY_SERVICES_MAX)
        .collect();
    let mut names = Vec::new();
    if !rows.is_empty() {
        let datacenter = &settings.datacenter;
        for domain in std::iter::once(&settings.dns_domain).chain(settings.alt_domain.as_ref()) {
            names.push(format!("*.ingress.{domain}"));
            names.push(format!("*.ingress.{datacenter}.{domain}"));
        }
    }
    for row in &rows {
        // `*` (allowed on a listener whose TLS the entry does not enable) and a host with
        // a port are no DNS names.
        names.extend(
            row.hosts
                .iter()
                .filter(|h| **h != *"*" && !has_port(h))
                .map(|h| h.to_string()),
        );
    }
    names.sort();
    names.dedup();
    names
}

/// The settings of an ingress gateway's entry its listeners do not apply yet: TLS from
/// SDS (the entry's, a listener's, a service's).
fn ingress_unapplied(tables: &Tables, gateway: &str) -> Vec<String> {
    let Some(body) = ingress_entry(tables, gateway) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if set(&body["TLS"]["SDS"]) {
        out.push("TLS.SDS".to_string());
    }
    for (l, listener) in body["Listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if set(&listener["TLS"]["SDS"]) {
            out.push(format!("Listeners[{l}].TLS.SDS"));
        }
        for (i, service) in listener["Services"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if set(&service["TLS"]["SDS"]) {
                out.push(format!("Listeners[{l}].Services[{i}].TLS.SDS"));
            }
        }
    }
    out
}

/// The services the terminating gateway `gateway` links, by name as its entry (or, for a
/// wildcard, the catalog) spells them, in name order, each once.
pub fn terminating_services(tables: &Tables, gateway: &str) -> Result<Vec<String>, String> {
    let rows = gateways::gateway_rows(tables, gateway);
    if rows.len() > GATEWAY_SERVICES_MAX {
        return Err(format!(
            "gateway {gateway:?} links {} services; at most {GATEWAY_SERVICES_MAX} are served",
            rows.len()
        ));
    }
    let mut names: Vec<String> = rows
        .into_iter()
        .filter(|r| r.gateway_kind == GatewayKind::Terminating)
        .map(|r| r.service.to_string())
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The instances of a service outside the mesh with their health: its own typical
/// instances (never a proxy or gateway fronting it).
fn external_endpoints(tables: &Tables, service: &str) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for row in crate::store::catalog::read::check_service_nodes(tables, service)
        .into_iter()
        .take(ENDPOINTS_PER_TARGET_MAX)
    {
        if !row.service.kind().is_empty() {
            continue;
        }
        let Ok(port) = u16::try_from(row.service.port) else {
            continue;
        };
        let address = if row.service.address.is_empty() {
            row.node.address.to_string()
        } else {
            row.service.address.to_string()
        };
        let healthy = row
            .node_checks
            .iter()
            .chain(row.service_checks.iter())
            .all(|c| !matches!(c.status, Status::Critical | Status::Maintenance));
        out.push(Endpoint {
            address,
            port,
            healthy,
            weight: row.service.weights.passing.max(1),
        });
    }
    out.sort_by(|a, b| (&a.address, a.port).cmp(&(&b.address, b.port)));
    out
}

/// The intentions that decide connections to `destination`, highest precedence first;
/// sources that name a peer or sameness group never match a local caller and are left out.
fn intention_sources(tables: &Tables, destination: &str) -> Result<Vec<IntentionSource>, String> {
    let matches = intentions::matches(tables, destination, true);
    if matches.len() > INTENTION_SOURCES_MAX {
        return Err(format!(
            "{} intentions name {destination:?}; at most {INTENTION_SOURCES_MAX} are enforced",
            matches.len()
        ));
    }
    let mut sources = Vec::with_capacity(matches.len());
    for (_, source) in matches {
        if !source.peer.is_empty() || !source.sameness_group.is_empty() {
            continue;
        }
        let rule = match source.action {
            Some(action) if !source.is_l7() => SourceRule::Action(action),
            _ => SourceRule::Permissions(permissions(&source.permissions_json)?),
        };
        sources.push(IntentionSource {
            name: source.name.to_string(),
            rule,
        });
    }
    Ok(sources)
}

fn strs(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn field(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_string()
}

fn headers(value: &Value) -> Vec<HeaderMatch> {
    value
        .as_array()
        .map(|list| {
            list.iter()
                .map(|h| HeaderMatch {
                    name: field(h, "Name"),
                    present: h["Present"].as_bool().unwrap_or(false),
                    exact: field(h, "Exact"),
                    prefix: field(h, "Prefix"),
                    suffix: field(h, "Suffix"),
                    regex: field(h, "Regex"),
                    invert: h["Invert"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Decodes an intention's stored `Permissions` (validated when written).
fn permissions(json: &str) -> Result<Vec<HttpPermission>, String> {
    if json.is_empty() {
        return Ok(Vec::new());
    }
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("stored permissions: {e}"))?;
    let list = value.as_array().map(Vec::as_slice).unwrap_or_default();
    Ok(list
        .iter()
        .map(|p| {
            let http = &p["HTTP"];
            HttpPermission {
                allow: p["Action"].as_str() == Some("allow"),
                path_exact: field(http, "PathExact"),
                path_prefix: field(http, "PathPrefix"),
                path_regex: field(http, "PathRegex"),
                methods: strs(&http["Methods"]),
                headers: headers(&http["Header"]),
            }
        })
        .collect())
}

fn millis(value: &Value) -> u64 {
    match value {
        Value::String(s) => crate::proto::duration::parse_go_duration_nanos(s)
            .map(|ns| (ns.max(0) / 1_000_000) as u64)
            .unwrap_or(0),
        Value::Number(n) => n
            .as_i64()
            .map(|ns| (ns.max(0) / 1_000_000) as u64)
            .unwrap_or(0),
        _ => 0,
    }
}

/// A compiled chain's nodes and targets, each by key.
type ChainParts = (BTreeMap<String, ChainNode>, BTreeMap<String, Target>);

/// The nodes and targets of a compiled chain (Consul's JSON shape, see
/// `consul::discovery_chain`), each target with the health of its instances.
fn chain_parts(
    chain: &Value,
    (tables, remote): (&Tables, &RemoteView),
    trust_domain: &str,
    local_datacenter: &str,
) -> Result<ChainParts, String> {
    let mut nodes = BTreeMap::new();
    for (key, node) in chain["Nodes"].as_object().into_iter().flatten() {
        nodes.insert(key.clone(), chain_node(node)?);
    }
    let mut targets = BTreeMap::new();
    for (id, target) in chain["Targets"].as_object().into_iter().flatten() {
        let target = chain_target(id, target, (tables, remote), trust_domain, local_datacenter)?;
        targets.insert(id.clone(), target);
    }
    Ok((nodes, targets))
}

/// One node of a compiled chain: a resolver, a splitter or a router.
fn chain_node(node: &Value) -> Result<ChainNode, String> {
    Ok(match node["Type"].as_str() {
        Some("resolver") => ChainNode::Resolver {
            target: field(&node["Resolver"], "Target"),
            failover: strs(&node["Resolver"]["Failover"]["Targets"]),
        },
        Some("splitter") => ChainNode::Splitter(
            node["Splits"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| Split {
                    weight: s["Weight"].as_f64().unwrap_or(0.0),
                    next: field(s, "NextNode"),
                })
                .collect(),
        ),
        Some("router") => ChainNode::Router(
            node["Routes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(route_rule)
                .collect(),
        ),
        other => return Err(format!("unknown discovery chain node type {other:?}")),
    })
}

/// One route of a router node: its HTTP match and where and how it sends the request.
fn route_rule(route: &Value) -> RouteRule {
    let definition = &route["Definition"];
    let http = &definition["Match"]["HTTP"];
    let dest = &definition["Destination"];
    RouteRule {
        path_exact: field(http, "PathExact"),
        path_prefix: field(http, "PathPrefix"),
        path_regex: field(http, "PathRegex"),
        methods: strs(&http["Methods"]),
        headers: headers(&http["Header"]),
        query_params: http["QueryParam"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|q| (field(q, "Name"), field(q, "Exact")))
            .collect(),
        prefix_rewrite: field(dest, "PrefixRewrite"),
        request_timeout_ms: millis(&dest["RequestTimeout"]),
        num_retries: dest["NumRetries"].as_u64().unwrap_or(0) as u32,
        retry_on_connect_failure: dest["RetryOnConnectFailure"].as_bool().unwrap_or(false),
        retry_on_status_codes: dest["RetryOnStatusCodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_u64().map(|c| c as u32))
            .collect(),
        next: field(route, "NextNode"),
    }
}

/// One target of a compiled chain with the endpoints that reach it.
fn chain_target(
    id: &str,
    target: &Value,
    (tables, remote): (&Tables, &RemoteView),
    trust_domain: &str,
    local_datacenter: &str,
) -> Result<Target, String> {
    let service = field(target, "Service");
    let datacenter = field(target, "Datacenter");
    let only_passing = target["Subset"]["OnlyPassing"].as_bool().unwrap_or(false);
    // A subset's `Filter` selects instances as `/v1/health/service/<s>?filter=` does; the
    // store validated it when the resolver was written, so one that no longer parses
    // selects nothing rather than everything.
    let filter = match target["Subset"]["Filter"]
        .as_str()
        .filter(|f| !f.is_empty())
    {
        None => Ok(None),
        Some(text) => Filter::parse(text, filter::CHECK_SERVICE_NODE),
    };
    let mesh_gateway_mode = if datacenter == local_datacenter {
        String::new()
    } else {
        field(&target["MeshGateway"], "Mode")
    };
    let endpoints = if datacenter != local_datacenter {
        // Another datacenter's target is reached as its `MeshGateway.Mode` says:
        // through this datacenter's mesh gateways, through the target datacenter's, or
        // (none, or nothing chose) at its own proxies. Through a gateway the SNI still
        // names the target, which the gateways route by.
        match mesh_gateway_mode.as_str() {
            "local" => local_mesh_gateways(tables),
            "remote" => remote.gateways(&datacenter),
            _ => match &filter {
                Ok(filter) => {
                    remote.connect_endpoints(&datacenter, &service, only_passing, filter.as_ref())
                }
                Err(_) => Vec::new(),
            },
        }
    } else {
        match &filter {
            Ok(filter) => endpoints(tables, &service, only_passing, filter.as_ref())?,
            Err(_) => Vec::new(),
        }
    };
    Ok(Target {
        id: id.to_string(),
        spiffe_id: spiffe_id(trust_domain, &datacenter, &service),
        subset: field(target, "ServiceSubset"),
        sni: field(target, "SNI"),
        connect_timeout_ms: millis(&target["ConnectTimeout"]),
        mesh_gateway_mode,
        service,
        datacenter,
        endpoints,
    })
}

/// The Connect-capable instances of `service` with their health: an instance whose checks
/// include a critical (or maintenance) one is unhealthy, and with `only_passing` so is one
/// with a warning; a healthy instance weighs its `Weights.Passing`, or `Weights.Warning`
/// while a check warns, as Consul's endpoint health and weight are computed. A subset's
/// filter sees each proxy as a `CheckServiceNode` (a sidecar carries its service's tags and
/// meta, so `Service.Meta.version == v1` selects the proxies of version 1).
fn endpoints(
    tables: &Tables,
    service: &str,
    only_passing: bool,
    filter: Option<&Filter>,
) -> Result<Vec<Endpoint>, String> {
    let mut views = connect_rows(tables, service).views;
    // A service a terminating gateway links is reached through the gateway, as Consul
    // appends the gateway's instances to the service's Connect endpoints.
    views.extend(crate::api::gateways::linked_instances(
        tables,
        service,
        GatewayKind::Terminating,
    ));
    let mut out = Vec::with_capacity(views.len().min(ENDPOINTS_PER_TARGET_MAX));
    for view in views.iter().take(ENDPOINTS_PER_TARGET_MAX) {
        let instance = &view.service;
        if let Some(filter) = filter {
            let row = CheckServiceNode {
                node: view.node(),
                service: instance,
                node_checks: view.node_checks(),
                service_checks: view.checks(),
            };
            if !filter.matches(&render::as_value(|w| render::check_service_node(w, &row))) {
                continue;
            }
        }
        debug_assert!(
            instance.kind() != "connect-proxy"
                || proxy_destination(instance).is_some_and(|d| d.eq_ignore_ascii_case(service)),
            "connect_rows returns proxies of the service asked for, the gateways no proxy"
        );
        let address = instance_address(view);
        let mut healthy = true;
        let mut weight = instance.weights.passing.max(1);
        for check in view.node_checks().iter().chain(view.checks().iter()) {
            match check.status {
                Status::Critical | Status::Maintenance => healthy = false,
                Status::Warning if only_passing => healthy = false,
                Status::Warning => weight = instance.weights.warning.max(1),
                _ => {}
            }
        }
        let Ok(port) = u16::try_from(instance.port) else {
            continue;
        };
        out.push(Endpoint {
            address,
            port,
            healthy,
            weight,
        });
    }
    out.sort_by(|a, b| (&a.address, a.port).cmp(&(&b.address, b.port)));
    Ok(out)
}

/// Where an instance is reached: its own address, else its node's (as Consul's
/// `CheckServiceNode.BestAddress` without the WAN choice).
fn instance_address(view: &InstanceView) -> String {
    let instance = &view.service;
    if instance.address.is_empty() {
        view.node().address.to_string()
    } else {
        instance.address.to_string()
    }
}

/// No check of the instance or of its node is critical or in maintenance.
fn not_failing(view: &InstanceView) -> bool {
    view.node_checks()
        .iter()
        .chain(view.checks().iter())
        .all(|check| !matches!(check.status, Status::Critical | Status::Maintenance))
}

/// Whether `protocol` is served at L7 (HTTP connection manager) rather than TCP.
pub fn is_l7(protocol: &str) -> bool {
    is_http_family(protocol)
}

/// This datacenter's mesh gateways at their own (LAN) addresses, with their health, in
/// address order: where a sidecar in `local` mode sends another datacenter's traffic.
fn local_mesh_gateways(tables: &Tables) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for group in tables.catalog.services.values() {
        for view in group.instances.values() {
            let instance = &view.service;
            if instance.kind() != MESH_GATEWAY_KIND || out.len() >= ENDPOINTS_PER_TARGET_MAX {
                continue;
            }
            let Ok(port) = u16::try_from(instance.port) else {
                continue;
            };
            let address = instance_address(view);
            let healthy = not_failing(view);
            out.push(Endpoint {
                address,
                port,
                healthy,
                weight: instance.weights.passing.max(1),
            });
        }
    }
    out.sort_by(|a, b| (&a.address, a.port).cmp(&(&b.address, b.port)));
    out
}

/// The names of the local services a mesh gateway carries traffic to: those with a
/// Connect-capable instance (a sidecar's destination, or a Connect-native service), in
/// name order, at most [`GATEWAY_SERVICES_MAX`].
fn connect_services(tables: &Tables) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    for (name, group) in tables.catalog.services.iter() {
        for view in group.instances.values() {
            let instance = &view.service;
            if instance.kind() == "connect-proxy" {
                if let Some(destination) = proxy_destination(instance) {
                    names.insert(destination.to_string());
                }
            } else if instance.extras.as_ref().is_some_and(|e| e.connect_native) {
                names.insert(name.to_string());
            }
        }
    }
    names.into_iter().take(GATEWAY_SERVICES_MAX).collect()
}

/// The subsets of `service`'s resolver, each with its filter and `OnlyPassing`.
fn resolver_subsets(tables: &Tables, service: &str) -> Vec<(String, String, bool)> {
    use crate::store::mesh::config_entry::{get, ConfigKind, EntryBody};
    let Some(entry) = get(tables, ConfigKind::ServiceResolver, service) else {
        return Vec::new();
    };
    let EntryBody::Json(text) = &entry.body else {
        return Vec::new();
    };
    let Ok(body) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    body["Subsets"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, subset)| {
            (
                name.clone(),
                field(subset, "Filter"),
                subset["OnlyPassing"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// Consul's SNI of a service (or one of its subsets) in `datacenter`.
pub fn service_sni(subset: &str, service: &str, datacenter: &str, trust_domain: &str) -> String {
    if subset.is_empty() {
        format!("{service}.default.{datacenter}.internal.{trust_domain}")
    } else {
        format!("{subset}.{service}.default.{datacenter}.internal.{trust_domain}")
    }
}

/// A mesh gateway's listeners and clusters: every local service with Connect-capable
/// instances (and each subset of its resolver) by its SNI, every other known datacenter by
/// `<datacenter>.internal.<trust domain>` at that datacenter's gateways.
fn mesh_gateway_routes(
    registration: &ProxyRegistration,
    tables: &Tables,
    remote: &RemoteView,
    settings: &XdsSettings,
    trust_domain: &str,
) -> Result<MeshGatewayRoutes, String> {
    let address = Some(registration.address.clone())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| PUBLIC_BIND_ADDRESS_DEFAULT.to_string());
    let mut listeners = vec![GatewayListener {
        name: "default".to_string(),
        address,
        port: registration.port,
    }];
    if let Some((wan_address, wan_port)) = &registration.wan_address {
        let wan_port = if *wan_port == 0 {
            registration.port
        } else {
            *wan_port
        };
        if (wan_address.as_str(), wan_port) != (listeners[0].address.as_str(), listeners[0].port) {
            listeners.push(GatewayListener {
                name: "wan".to_string(),
                address: wan_address.clone(),
                port: wan_port,
            });
        }
    }
    let local = &settings.datacenter;
    let mut services = Vec::new();
    for service in connect_services(tables) {
        services.push(GatewayCluster {
            name: service_sni("", &service, local, trust_domain),
            endpoints: endpoints(tables, &service, false, None)?,
        });
        for (subset, filter, only_passing) in resolver_subsets(tables, &service) {
            let filter = if filter.is_empty() {
                None
            } else {
                match Filter::parse(&filter, filter::CHECK_SERVICE_NODE) {
                    Ok(filter) => filter,
                    // Validated when written; one that no longer parses selects nothing.
                    Err(_) => continue,
                }
            };
            services.push(GatewayCluster {
                name: service_sni(&subset, &service, local, trust_domain),
                endpoints: endpoints(tables, &service, only_passing, filter.as_ref())?,
            });
        }
    }
    services.sort_by(|a, b| a.name.cmp(&b.name));
    services.dedup_by(|a, b| a.name == b.name);
    let datacenters = remote
        .datacenters
        .iter()
        .filter(|dc| *dc != local)
        .map(|dc| {
            (
                dc.clone(),
                GatewayCluster {
                    name: format!("{dc}.internal.{trust_domain}"),
                    endpoints: remote.gateways(dc),
                },
            )
        })
        .collect();
    let (servers, server_datacenters, any_server) = if registration.expose_servers {
        let domain = settings.dns_domain.trim_end_matches('.');
        let remote_servers = remote
            .datacenters
            .iter()
            .filter(|dc| *dc != local)
            .map(|dc| {
                let cluster = GatewayCluster {
                    name: format!("server.{dc}.{domain}"),
                    endpoints: remote.gateways(dc),
                };
                (dc.clone(), cluster)
            })
            .collect();
        let servers = local_servers(tables, local, domain);
        let any_server = (!servers.is_empty()).then(|| GatewayCluster {
            name: format!("server.{local}.{domain}"),
            endpoints: servers
                .iter()
                .flat_map(|server| server.endpoints.iter().cloned())
                .collect(),
        });
        (servers, remote_servers, any_server)
    } else {
        (Vec::new(), Vec::new(), None)
    };
    Ok(MeshGatewayRoutes {
        listeners,
        services,
        datacenters,
        servers,
        server_datacenters,
        any_server,
    })
}

/// This datacenter's servers as a WAN-federating mesh gateway reaches them: each server's
/// `consul` service instance (registered at its server RPC port), one cluster per server
/// named by Consul's `ServerSNI`, `<node>.server.<datacenter>.<domain>`. A server whose
/// checks are critical keeps its cluster with its endpoint marked unhealthy, so Envoy
/// refuses the connection instead of sending it to a failed server.
fn local_servers(tables: &Tables, datacenter: &str, domain: &str) -> Vec<GatewayCluster> {
    let Some(group) = tables.catalog.group(CONSUL_SERVICE) else {
        return Vec::new();
    };
    let mut servers: Vec<GatewayCluster> = group
        .instances
        .values()
        .take(ENDPOINTS_PER_TARGET_MAX)
        .filter_map(|view| {
            let node = view.node();
            let instance = &view.service;
            let port = u16::try_from(instance.port).ok()?;
            let address = instance_address(view);
            let healthy = not_failing(view);
            Some(GatewayCluster {
                name: format!("{}.server.{datacenter}.{domain}", node.name),
                endpoints: vec![Endpoint {
                    address,
                    port,
                    healthy,
                    weight: 1,
                }],
            })
        })
        .collect();
    servers.sort_by(|a, b| a.name.cmp(&b.name));
    servers.dedup_by(|a, b| a.name == b.name);
    servers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::catalog::{CatalogOp, Registration, ServiceRegistration};
    use crate::store::Command;
    use crate::xds::remote::{RemoteAnswer, RemoteInstance, RemoteQuery};
    use std::sync::Arc;

    fn register(tables: &mut Tables, index: u64, node: &str, kind: &str, name: &str, port: i32) {
        let proxy_json =
            (kind == "connect-proxy").then(|| r#"{"DestinationServiceName":"db"}"#.to_string());
        let reg = Registration {
            node: node.into(),
            address: format!("10.0.0.{index}"),
            datacenter: "dc1".into(),
            service: Some(ServiceRegistration {
                kind: kind.into(),
                id: name.into(),
                name: name.into(),
                port,
                proxy_json,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut changes = Vec::new();
        tables.apply(
            index,
            &Command::Catalog(CatalogOp::Register(Box::new(reg))),
            &mut changes,
        );
    }

    fn instance(address: &str, port: u16) -> RemoteInstance {
        RemoteInstance {
            row: Value::Null,
            lan_address: address.into(),
            port,
            wan_address: format!("wan-{address}"),
            wan_port: port + 1,
            critical: false,
            warning: false,
            weight_passing: 1,
            weight_warning: 1,
        }
    }

    /// A compiled chain whose one target is `db` in dc2 with `mode`.
    fn chain(mode: &str) -> Value {
        serde_json::json!({
            "Nodes": {"resolver:db.default.default.dc2": {"Type": "resolver",
                "Resolver": {"Target": "db.default.default.dc2"}}},
            "Targets": {"db.default.default.dc2": {"Service": "db", "Datacenter": "dc2",
                "SNI": "db.default.dc2.internal.td", "MeshGateway": {"Mode": mode}}}
        })
    }

    /// dc2 as the remote view answers it: one mesh gateway, `mesh-gateway` at 10.2.0.9:8443.
    fn with_dc2_gateway(remote: &mut RemoteView) {
        remote.answers.insert(
            RemoteQuery::GatewayNames {
                datacenter: "dc2".into(),
            },
            Arc::new(RemoteAnswer::Names(vec!["mesh-gateway".into()])),
        );
        remote.answers.insert(
            RemoteQuery::Gateways {
                datacenter: "dc2".into(),
                name: "mesh-gateway".into(),
            },
            Arc::new(RemoteAnswer::Instances(vec![instance("10.2.0.9", 8443)])),
        );
    }

    #[test]
    fn a_remote_target_is_reached_as_its_mode_says() {
        let mut tables = Tables::default();
        register(
            &mut tables,
            1,
            "gw-node",
            "mesh-gateway",
            "mesh-gateway",
            8443,
        );
        let mut remote = RemoteView::default();
        remote.answers.insert(
            RemoteQuery::Connect {
                datacenter: "dc2".into(),
                service: "db".into(),
            },
            Arc::new(RemoteAnswer::Instances(vec![instance("10.2.0.5", 21000)])),
        );
        with_dc2_gateway(&mut remote);
        let reached = |mode: &str| {
            let (_, targets) = chain_parts(&chain(mode), (&tables, &remote), "td", "dc1").unwrap();
            let target = &targets["db.default.default.dc2"];
            assert_eq!(
                target.sni, "db.default.dc2.internal.td",
                "the SNI stays the target's"
            );
            assert_eq!(target.mesh_gateway_mode, mode);
            target
                .endpoints
                .iter()
                .map(|e| format!("{}:{}", e.address, e.port))
                .collect::<Vec<_>>()
        };
        assert_eq!(reached(""), vec!["10.2.0.5:21000"]);
        assert_eq!(reached("none"), vec!["10.2.0.5:21000"]);
        assert_eq!(reached("local"), vec!["10.0.0.1:8443"]);
        assert_eq!(reached("remote"), vec!["wan-10.2.0.9:8444"]);
    }

    #[test]
    fn a_mesh_gateway_routes_local_services_and_other_datacenters() {
        let mut tables = Tables::default();
        register(
            &mut tables,
            1,
            "n1",
            "connect-proxy",
            "db-sidecar-proxy",
            21000,
        );
        register(&mut tables, 2, "n2", "", "plain", 80);
        let mut remote = RemoteView {
            datacenters: vec!["dc1".into(), "dc2".into()],
            ..Default::default()
        };
        with_dc2_gateway(&mut remote);
        let registration = ProxyRegistration {
            kind: ProxyKind::MeshGateway,
            id: "mesh-gateway".into(),
            service: "mesh-gateway".into(),
            address: "10.0.0.9".into(),
            port: 8443,
            destination_name: "mesh-gateway".into(),
            destination_id: String::new(),
            local_address: String::new(),
            local_port: 0,
            config: Default::default(),
            upstreams: Vec::new(),
            mesh_gateway_mode: String::new(),
            wan_address: Some(("198.51.100.9".into(), 443)),
            expose_servers: false,
            content_hash: String::new(),
            expose: Default::default(),
        };
        let settings = XdsSettings {
            datacenter: "dc1".into(),
            default_allow: true,
            dns_domain: "consul".into(),
            alt_domain: None,
            node_name: "node1".into(),
            advertise_address: "127.0.0.1".into(),
        };
        let routes = mesh_gateway_routes(&registration, &tables, &remote, &settings, "td").unwrap();
        let listeners: Vec<_> = routes
            .listeners
            .iter()
            .map(|l| format!("{}:{}:{}", l.name, l.address, l.port))
            .collect();
        assert_eq!(
            listeners,
            vec!["default:10.0.0.9:8443", "wan:198.51.100.9:443"]
        );
        assert_eq!(
            routes.services.len(),
            1,
            "only services with a sidecar: {routes:?}"
        );
        assert_eq!(routes.services[0].name, "db.default.dc1.internal.td");
        assert_eq!(routes.services[0].endpoints[0].port, 21000);
        assert_eq!(routes.datacenters.len(), 1);
        assert_eq!(routes.datacenters[0].1.name, "dc2.internal.td");
        assert_eq!(routes.datacenters[0].1.endpoints[0].address, "wan-10.2.0.9");
        assert!(
            routes.servers.is_empty()
                && routes.server_datacenters.is_empty()
                && routes.any_server.is_none(),
            "server names are routed only with -expose-servers"
        );

        // The same gateway registered with -expose-servers: each local server by its node
        // name at its server port, each other datacenter's servers through its gateways.
        register(&mut tables, 3, "s2", "", "consul", 8300);
        register(&mut tables, 4, "s1", "", "consul", 8300);
        let exposing = ProxyRegistration {
            expose_servers: true,
            ..registration
        };
        let routes = mesh_gateway_routes(&exposing, &tables, &remote, &settings, "td").unwrap();
        let servers: Vec<_> = routes
            .servers
            .iter()
            .map(|c| {
                let e = &c.endpoints[0];
                (
                    c.name.as_str(),
                    format!("{}:{}", e.address, e.port),
                    e.healthy,
                )
            })
            .collect();
        assert_eq!(
            servers,
            vec![
                ("s1.server.dc1.consul", "10.0.0.4:8300".to_string(), true),
                ("s2.server.dc1.consul", "10.0.0.3:8300".to_string(), true),
            ]
        );
        assert_eq!(routes.server_datacenters.len(), 1);
        let (dc, cluster) = &routes.server_datacenters[0];
        assert_eq!(
            (dc.as_str(), cluster.name.as_str()),
            ("dc2", "server.dc2.consul")
        );
        assert_eq!(cluster.endpoints[0].address, "wan-10.2.0.9");
        // And all of them under the catch-all name, for a dialer that names no server.
        let any = routes.any_server.as_ref().unwrap();
        assert_eq!(any.name, "server.dc1.consul");
        let ports: Vec<_> = any
            .endpoints
            .iter()
            .map(|e| format!("{}:{}", e.address, e.port))
            .collect();
        assert_eq!(ports, vec!["10.0.0.4:8300", "10.0.0.3:8300"]);
    }
}
