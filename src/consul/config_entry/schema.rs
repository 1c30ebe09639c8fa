//! The fields of each config entry kind, in the order Consul's structs declare them
//! (`agent/structs/config_entry*.go`), with whether Consul writes each one when empty.
//! Deep structures praetor does not act on (Envoy extensions, rate limits, load balancer
//! policies, header modifiers) are opaque: kept as given and written back.

use super::doc::{always, omit, Ty, F};
use crate::store::mesh::config_entry::ConfigKind;

const MESH_GATEWAY: &[F] = &[omit("Mode", Ty::Str)];
const TRANSPARENT_PROXY: &[F] = &[
    omit("OutboundListenerPort", Ty::Int),
    omit("DialedDirectly", Ty::Bool),
];
const EXPOSE_PATH: &[F] = &[
    omit("ListenerPort", Ty::Int),
    omit("Path", Ty::Str),
    omit("LocalPathPort", Ty::Int),
    omit("Protocol", Ty::Str),
];
const EXPOSE: &[F] = &[
    omit("Checks", Ty::Bool),
    omit("Paths", Ty::ObjList(EXPOSE_PATH)),
];
const LIMITS: &[F] = &[
    omit("MaxConnections", Ty::Int),
    omit("MaxPendingRequests", Ty::Int),
    omit("MaxConcurrentRequests", Ty::Int),
];
const PASSIVE_HEALTH_CHECK: &[F] = &[
    omit("Interval", Ty::Duration),
    omit("MaxFailures", Ty::Int),
    omit("EnforcingConsecutive5xx", Ty::Int),
    omit("MaxEjectionPercent", Ty::Int),
    omit("BaseEjectionTime", Ty::Duration),
];
const UPSTREAM_CONFIG: &[F] = &[
    omit("Name", Ty::Str),
    omit("Peer", Ty::Str),
    omit("EnvoyListenerJSON", Ty::Str),
    omit("EnvoyClusterJSON", Ty::Str),
    omit("Protocol", Ty::Str),
    omit("ConnectTimeoutMs", Ty::Int),
    omit("Limits", Ty::OptObj(LIMITS)),
    omit("PassiveHealthCheck", Ty::OptObj(PASSIVE_HEALTH_CHECK)),
    omit("MeshGateway", Ty::Obj(MESH_GATEWAY)),
    omit("BalanceOutboundConnections", Ty::Str),
];
const UPSTREAM_CONFIGURATION: &[F] = &[
    omit("Overrides", Ty::ObjList(UPSTREAM_CONFIG)),
    omit("Defaults", Ty::OptObj(UPSTREAM_CONFIG)),
];
const DESTINATION: &[F] = &[omit("Addresses", Ty::StrList), omit("Port", Ty::Int)];
const ACCESS_LOGS: &[F] = &[
    omit("Enabled", Ty::Bool),
    omit("DisableListenerLogs", Ty::Bool),
    omit("Type", Ty::Str),
    omit("Path", Ty::Str),
    omit("JSONFormat", Ty::Str),
    omit("TextFormat", Ty::Str),
];

const SERVICE_DEFAULTS: &[F] = &[
    always("Protocol", Ty::Str),
    omit("Mode", Ty::Str),
    omit("TransparentProxy", Ty::Obj(TRANSPARENT_PROXY)),
    omit("MutualTLSMode", Ty::Str),
    omit("MeshGateway", Ty::Obj(MESH_GATEWAY)),
    omit("Expose", Ty::Obj(EXPOSE)),
    omit("ExternalSNI", Ty::Str),
    omit("UpstreamConfig", Ty::OptObj(UPSTREAM_CONFIGURATION)),
    omit("Destination", Ty::OptObj(DESTINATION)),
    omit("MaxInboundConnections", Ty::Int),
    omit("LocalConnectTimeoutMs", Ty::Int),
    omit("LocalRequestTimeoutMs", Ty::Int),
    omit("BalanceInboundConnections", Ty::Str),
    omit("RateLimits", Ty::OpaqueMap),
    omit("EnvoyExtensions", Ty::Opaque),
    omit("Meta", Ty::StrMap),
];

const PROXY_DEFAULTS: &[F] = &[
    always("Config", Ty::OpaqueMap),
    omit("Mode", Ty::Str),
    omit("TransparentProxy", Ty::Obj(TRANSPARENT_PROXY)),
    omit("MutualTLSMode", Ty::Str),
    omit("MeshGateway", Ty::Obj(MESH_GATEWAY)),
    omit("Expose", Ty::Obj(EXPOSE)),
    omit("AccessLogs", Ty::Obj(ACCESS_LOGS)),
    omit("EnvoyExtensions", Ty::Opaque),
    omit("FailoverPolicy", Ty::OpaqueMap),
    omit("PrioritizeByLocality", Ty::OpaqueMap),
    omit("Meta", Ty::StrMap),
];

const HEADER_MATCH: &[F] = &[
    always("Name", Ty::Str),
    omit("Present", Ty::Bool),
    omit("Exact", Ty::Str),
    omit("Prefix", Ty::Str),
    omit("Suffix", Ty::Str),
    omit("Regex", Ty::Str),
    omit("Invert", Ty::Bool),
];
const QUERY_MATCH: &[F] = &[
    always("Name", Ty::Str),
    omit("Present", Ty::Bool),
    omit("Exact", Ty::Str),
    omit("Regex", Ty::Str),
];
const HTTP_MATCH: &[F] = &[
    omit("PathExact", Ty::Str),
    omit("PathPrefix", Ty::Str),
    omit("PathRegex", Ty::Str),
    omit("Header", Ty::ObjList(HEADER_MATCH)),
    omit("QueryParam", Ty::ObjList(QUERY_MATCH)),
    omit("Methods", Ty::StrList),
];
const ROUTE_MATCH: &[F] = &[omit("HTTP", Ty::OptObj(HTTP_MATCH))];
const ROUTE_DESTINATION: &[F] = &[
    omit("Service", Ty::Str),
    omit("ServiceSubset", Ty::Str),
    omit("PrefixRewrite", Ty::Str),
    omit("RequestTimeout", Ty::Duration),
    omit("IdleTimeout", Ty::Duration),
    omit("NumRetries", Ty::Int),
    omit("RetryOnConnectFailure", Ty::Bool),
    omit("RetryOnStatusCodes", Ty::IntList),
    omit("RetryOn", Ty::StrList),
    omit("RequestHeaders", Ty::OpaqueMap),
    omit("ResponseHeaders", Ty::OpaqueMap),
];
const ROUTE: &[F] = &[
    omit("Match", Ty::OptObj(ROUTE_MATCH)),
    omit("Destination", Ty::OptObj(ROUTE_DESTINATION)),
];
const SERVICE_ROUTER: &[F] = &[omit("Routes", Ty::ObjList(ROUTE)), omit("Meta", Ty::StrMap)];

const SPLIT: &[F] = &[
    always("Weight", Ty::Float),
    omit("Service", Ty::Str),
    omit("ServiceSubset", Ty::Str),
    omit("RequestHeaders", Ty::OpaqueMap),
    omit("ResponseHeaders", Ty::OpaqueMap),
];
const SERVICE_SPLITTER: &[F] = &[omit("Splits", Ty::ObjList(SPLIT)), omit("Meta", Ty::StrMap)];

const SUBSET: &[F] = &[omit("Filter", Ty::Str), omit("OnlyPassing", Ty::Bool)];
const REDIRECT: &[F] = &[
    omit("Service", Ty::Str),
    omit("ServiceSubset", Ty::Str),
    omit("Datacenter", Ty::Str),
    omit("Peer", Ty::Str),
    omit("SamenessGroup", Ty::Str),
];
const FAILOVER_TARGET: &[F] = &[
    omit("Service", Ty::Str),
    omit("ServiceSubset", Ty::Str),
    omit("Datacenter", Ty::Str),
    omit("Peer", Ty::Str),
];
const FAILOVER: &[F] = &[
    omit("Service", Ty::Str),
    omit("ServiceSubset", Ty::Str),
    omit("Datacenters", Ty::StrList),
    omit("Targets", Ty::ObjList(FAILOVER_TARGET)),
    omit("Policy", Ty::OpaqueMap),
    omit("SamenessGroup", Ty::Str),
];
const SERVICE_RESOLVER: &[F] = &[
    omit("DefaultSubset", Ty::Str),
    omit("Subsets", Ty::ObjMap(SUBSET)),
    omit("Redirect", Ty::OptObj(REDIRECT)),
    omit("Failover", Ty::ObjMap(FAILOVER)),
    omit("ConnectTimeout", Ty::Duration),
    omit("RequestTimeout", Ty::Duration),
    omit("PrioritizeByLocality", Ty::OpaqueMap),
    omit("LoadBalancer", Ty::OpaqueMap),
    omit("Meta", Ty::StrMap),
];

const GATEWAY_TLS: &[F] = &[
    always("Enabled", Ty::Bool),
    omit("TLSMinVersion", Ty::Str),
    omit("TLSMaxVersion", Ty::Str),
    omit("CipherSuites", Ty::StrList),
    omit("SDS", Ty::OpaqueMap),
];
const INGRESS_SERVICE: &[F] = &[
    always("Name", Ty::Str),
    always("Hosts", Ty::StrList),
    omit("TLS", Ty::OpaqueMap),
    omit("RequestHeaders", Ty::OpaqueMap),
    omit("ResponseHeaders", Ty::OpaqueMap),
    omit("MaxConnections", Ty::Int),
    omit("MaxPendingRequests", Ty::Int),
    omit("MaxConcurrentRequests", Ty::Int),
    omit("PassiveHealthCheck", Ty::OpaqueMap),
];
const INGRESS_LISTENER: &[F] = &[
    always("Port", Ty::Int),
    always("Protocol", Ty::Str),
    always("Services", Ty::ObjList(INGRESS_SERVICE)),
    omit("TLS", Ty::OptObj(GATEWAY_TLS)),
];
const INGRESS_GATEWAY: &[F] = &[
    omit("TLS", Ty::Obj(GATEWAY_TLS)),
    always("Listeners", Ty::ObjList(INGRESS_LISTENER)),
    omit("Defaults", Ty::OpaqueMap),
    omit("Meta", Ty::StrMap),
];

const LINKED_SERVICE: &[F] = &[
    omit("Name", Ty::Str),
    omit("CAFile", Ty::Str),
    omit("CertFile", Ty::Str),
    omit("KeyFile", Ty::Str),
    omit("SNI", Ty::Str),
    omit("DisableAutoHostRewrite", Ty::Bool),
];
const TERMINATING_GATEWAY: &[F] = &[
    omit("Services", Ty::ObjList(LINKED_SERVICE)),
    omit("Meta", Ty::StrMap),
];

const MESH_TRANSPARENT_PROXY: &[F] = &[omit("MeshDestinationsOnly", Ty::Bool)];
const MESH_DIRECTION_TLS: &[F] = &[
    omit("TLSMinVersion", Ty::Str),
    omit("TLSMaxVersion", Ty::Str),
    omit("CipherSuites", Ty::StrList),
];
const MESH_TLS: &[F] = &[
    omit("Incoming", Ty::OptObj(MESH_DIRECTION_TLS)),
    omit("Outgoing", Ty::OptObj(MESH_DIRECTION_TLS)),
];
const MESH_HTTP: &[F] = &[omit("SanitizeXForwardedClientCert", Ty::Bool)];
const MESH_PEERING: &[F] = &[omit("PeerThroughMeshGateways", Ty::Bool)];
const MESH: &[F] = &[
    omit("TransparentProxy", Ty::Obj(MESH_TRANSPARENT_PROXY)),
    omit("AllowEnablingPermissiveMutualTLS", Ty::Bool),
    omit("ValidateClusters", Ty::Bool),
    omit("TLS", Ty::OptObj(MESH_TLS)),
    omit("HTTP", Ty::OptObj(MESH_HTTP)),
    omit("Peering", Ty::OptObj(MESH_PEERING)),
    omit("Meta", Ty::StrMap),
];

const SERVICE_CONSUMER: &[F] = &[
    omit("Partition", Ty::Str),
    omit("Peer", Ty::Str),
    omit("SamenessGroup", Ty::Str),
];
const EXPORTED_SERVICE: &[F] = &[
    always("Name", Ty::Str),
    omit("Namespace", Ty::Str),
    omit("Consumers", Ty::ObjList(SERVICE_CONSUMER)),
];
const EXPORTED_SERVICES: &[F] = &[
    omit("Services", Ty::ObjList(EXPORTED_SERVICE)),
    omit("Meta", Ty::StrMap),
];

pub const PERMISSION_HTTP: &[F] = &[
    omit("PathExact", Ty::Str),
    omit("PathPrefix", Ty::Str),
    omit("PathRegex", Ty::Str),
    omit("Header", Ty::ObjList(HEADER_MATCH)),
    omit("Methods", Ty::StrList),
];
pub const PERMISSION: &[F] = &[
    always("Action", Ty::Str),
    omit("HTTP", Ty::OptObj(PERMISSION_HTTP)),
    omit("JWT", Ty::OpaqueMap),
];
pub const SOURCE_INTENTION: &[F] = &[
    always("Name", Ty::Str),
    omit("Peer", Ty::Str),
    omit("SamenessGroup", Ty::Str),
    omit("Action", Ty::Str),
    omit("Permissions", Ty::ObjList(PERMISSION)),
    always("Precedence", Ty::Int),
    omit("LegacyID", Ty::Str),
    always("Type", Ty::Str),
    omit("Description", Ty::Str),
    omit("LegacyMeta", Ty::StrMap),
    omit("LegacyCreateTime", Ty::Str),
    omit("LegacyUpdateTime", Ty::Str),
];
const SERVICE_INTENTIONS: &[F] = &[
    always("Sources", Ty::ObjList(SOURCE_INTENTION)),
    omit("JWT", Ty::OpaqueMap),
    omit("Meta", Ty::StrMap),
    // Written by Consul as a change detector; accepted and not stored.
    omit("Hash", Ty::Int),
];

/// The fields of `kind` after `Kind` and `Name`.
pub fn fields(kind: ConfigKind) -> &'static [F] {
    match kind {
        ConfigKind::ServiceDefaults => SERVICE_DEFAULTS,
        ConfigKind::ProxyDefaults => PROXY_DEFAULTS,
        ConfigKind::ServiceRouter => SERVICE_ROUTER,
        ConfigKind::ServiceSplitter => SERVICE_SPLITTER,
        ConfigKind::ServiceResolver => SERVICE_RESOLVER,
        ConfigKind::IngressGateway => INGRESS_GATEWAY,
        ConfigKind::TerminatingGateway => TERMINATING_GATEWAY,
        ConfigKind::ServiceIntentions => SERVICE_INTENTIONS,
        ConfigKind::Mesh => MESH,
        ConfigKind::ExportedServices => EXPORTED_SERVICES,
    }
}

/// Whether entries of `kind` have a `Name` field (a `mesh` entry has none: there is one).
pub fn has_name(kind: ConfigKind) -> bool {
    kind != ConfigKind::Mesh
}
