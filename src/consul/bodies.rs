//! The request bodies of Consul's HTTP API as its JSON decoder sees them: for each Go struct
//! a body decodes into, the fields it has, the JSON each takes, and the other spellings
//! Consul translates onto them. [`body::parse_strict`](super::body::parse_strict) checks a
//! body against one of these tables before the lenient accessors read it, so an unknown
//! field or a value of the wrong type is refused as Consul refuses it.
//!
//! Invariants: a table lists every field Consul's struct decodes (its embedded `RaftIndex`,
//! `WriteRequest` and, in Consul's community edition, empty `EnterpriseMeta` included), so a
//! body a real Consul accepts is never refused here; snake-case aliases appear only where
//! Consul's own `UnmarshalJSON` declares them. Tables follow Consul 1.22's structs: the
//! agent's (`structs.*`) for agent, catalog, ACL and query bodies, the client library's
//! (`api.*`) where Consul decodes into those (transactions, autopilot).

use super::body::{aliased, field, Field, Kind, Schema};
use Kind::{
    Any, AnyObj, Bool, Bytes, Duration, Float, FloatList, Int, Obj, ObjList, ObjMap, Str, StrList,
    StrListMap, StrMap, Uint,
};

const fn strict(go_type: &'static str, fields: &'static [Field]) -> Schema {
    Schema {
        go_type,
        strict: true,
        fields,
    }
}

/// A struct whose own `UnmarshalJSON` decodes with plain `json.Unmarshal`: its fields are
/// typed, but keys it does not know are ignored.
const fn lenient(go_type: &'static str, fields: &'static [Field]) -> Schema {
    Schema {
        go_type,
        strict: false,
        fields,
    }
}

const CREATE_INDEX: Field = field("CreateIndex", Uint);
const MODIFY_INDEX: Field = field("ModifyIndex", Uint);

// ---- Services and their mesh settings ----

pub static SERVICE_ADDRESS: Schema = strict(
    "structs.ServiceAddress",
    &[field("Address", Str), field("Port", Int)],
);

pub static WEIGHTS: Schema = strict(
    "structs.Weights",
    &[field("Passing", Int), field("Warning", Int)],
);

pub static LOCALITY: Schema = strict(
    "structs.Locality",
    &[field("Region", Str), field("Zone", Str)],
);

pub static MESH_GATEWAY: Schema = strict("structs.MeshGatewayConfig", &[field("Mode", Str)]);

pub static TRANSPARENT_PROXY: Schema = strict(
    "structs.TransparentProxyConfig",
    &[
        aliased("OutboundListenerPort", &["outbound_listener_port"], Int),
        aliased("DialedDirectly", &["dialed_directly"], Bool),
    ],
);

pub static ACCESS_LOGS: Schema = strict(
    "structs.AccessLogsConfig",
    &[
        field("Enabled", Bool),
        field("DisableListenerLogs", Bool),
        field("Type", Str),
        field("Path", Str),
        field("JSONFormat", Str),
        field("TextFormat", Str),
    ],
);

pub static EXPOSE_PATH: Schema = strict(
    "structs.ExposePath",
    &[
        aliased("ListenerPort", &["listener_port"], Int),
        field("Path", Str),
        aliased("LocalPathPort", &["local_path_port"], Int),
        field("Protocol", Str),
        aliased("ParsedFromCheck", &["parsed_from_check"], Bool),
    ],
);

pub static EXPOSE: Schema = strict(
    "structs.ExposeConfig",
    &[field("Checks", Bool), field("Paths", ObjList(&EXPOSE_PATH))],
);

pub static UPSTREAM: Schema = strict(
    "structs.Upstream",
    &[
        aliased("DestinationType", &["destination_type"], Str),
        aliased("DestinationNamespace", &["destination_namespace"], Str),
        aliased("DestinationPartition", &["destination_partition"], Str),
        aliased("DestinationPeer", &["destination_peer"], Str),
        aliased("DestinationName", &["destination_name"], Str),
        field("Datacenter", Str),
        aliased("LocalBindAddress", &["local_bind_address"], Str),
        aliased("LocalBindPort", &["local_bind_port"], Int),
        aliased("LocalBindSocketPath", &["local_bind_socket_path"], Str),
        aliased("LocalBindSocketMode", &["local_bind_socket_mode"], Str),
        field("Config", AnyObj),
        aliased("MeshGateway", &["mesh_gateway"], Obj(&MESH_GATEWAY)),
        field("CentrallyConfigured", Bool),
    ],
);

pub static ENVOY_EXTENSION: Schema = strict(
    "structs.EnvoyExtension",
    &[
        field("Name", Str),
        field("Required", Bool),
        field("Arguments", AnyObj),
        field("ConsulVersion", Str),
        field("EnvoyVersion", Str),
    ],
);

/// `structs.ConnectProxyConfig`, a proxy registration's `Proxy`.
pub static PROXY: Schema = strict(
    "structs.ConnectProxyConfig",
    &[
        field("EnvoyExtensions", ObjList(&ENVOY_EXTENSION)),
        aliased("DestinationServiceName", &["destination_service_name"], Str),
        aliased("DestinationServiceID", &["destination_service_id"], Str),
        aliased("LocalServiceAddress", &["local_service_address"], Str),
        aliased("LocalServicePort", &["local_service_port"], Int),
        aliased(
            "LocalServiceSocketPath",
            &["local_service_socket_path"],
            Str,
        ),
        field("Mode", Str),
        field("Config", AnyObj),
        field("Upstreams", ObjList(&UPSTREAM)),
        aliased("MeshGateway", &["mesh_gateway"], Obj(&MESH_GATEWAY)),
        field("Expose", Obj(&EXPOSE)),
        aliased(
            "TransparentProxy",
            &["transparent_proxy"],
            Obj(&TRANSPARENT_PROXY),
        ),
        aliased("AccessLogs", &["access_logs"], Obj(&ACCESS_LOGS)),
        aliased("MutualTLSMode", &["mutual_tls_mode"], Str),
    ],
);

/// `structs.ServiceConnect`: native Connect, or the sidecar to register with the service.
pub static SERVICE_CONNECT: Schema = strict(
    "structs.ServiceConnect",
    &[
        field("Native", Bool),
        aliased(
            "SidecarService",
            &["sidecar_service"],
            Obj(&SERVICE_DEFINITION),
        ),
    ],
);

// ---- Checks ----

/// The fields `structs.CheckType` and `structs.CheckDefinition` share (Consul copies them
/// from one to the other, with the same snake-case twins), after `$first`, the fields each
/// has of its own.
macro_rules! check_fields {
    ($($first:expr),* $(,)?) => {
        &[
            $($first,)*
            field("Name", Str),
            field("Status", Str),
            field("Notes", Str),
            aliased("ServiceID", &["service_id"], Str),
            aliased("ScriptArgs", &["args", "script_args"], StrList),
            field("HTTP", Str),
            field("H2PING", Str),
            aliased("H2PingUseTLS", &["h2ping_use_tls"], Bool),
            field("Header", StrListMap),
            field("Method", Str),
            field("Body", Str),
            aliased("DisableRedirects", &["disable_redirects"], Bool),
            field("TCP", Str),
            aliased("TCPUseTLS", &["tcp_use_tls"], Bool),
            field("UDP", Str),
            field("Interval", Duration),
            field("AliasNode", Str),
            field("AliasService", Str),
            aliased("DockerContainerID", &["docker_container_id"], Str),
            field("Shell", Str),
            field("GRPC", Str),
            aliased("GRPCUseTLS", &["grpc_use_tls"], Bool),
            field("OSService", Str),
            aliased("TLSServerName", &["tls_server_name"], Str),
            aliased("TLSSkipVerify", &["tls_skip_verify"], Bool),
            field("Timeout", Duration),
            field("TTL", Duration),
            field("SuccessBeforePassing", Int),
            field("FailuresBeforeWarning", Int),
            field("FailuresBeforeCritical", Int),
            aliased(
                "DeregisterCriticalServiceAfter",
                &["deregister_critical_service_after"],
                Duration,
            ),
            field("OutputMaxSize", Int),
        ]
    };
}

/// `structs.CheckType`: a check inside a service definition (its `ServiceID` is accepted
/// and ignored, as Consul's decoder declares it for that purpose).
pub static CHECK_TYPE: Schema = strict(
    "structs.CheckType",
    check_fields![
        field("CheckID", Str),
        field("ProxyHTTP", Str),
        field("ProxyGRPC", Str),
    ],
);

/// `structs.CheckDefinition`: `PUT /v1/agent/check/register`.
pub static CHECK_DEFINITION: Schema = strict(
    "structs.CheckDefinition",
    check_fields![field("ID", Str), field("Token", Str)],
);

/// The body of `PUT /v1/agent/check/update/<id>`.
pub static CHECK_UPDATE: Schema = strict(
    "agent.checkUpdate",
    &[field("Status", Str), field("Output", Str)],
);

/// `structs.ServiceDefinition`: `PUT /v1/agent/service/register` and a sidecar's
/// `Connect.SidecarService`.
pub static SERVICE_DEFINITION: Schema = strict(
    "structs.ServiceDefinition",
    &[
        field("Kind", Str),
        field("ID", Str),
        field("Name", Str),
        field("Tags", StrList),
        field("Address", Str),
        aliased(
            "TaggedAddresses",
            &["tagged_addresses"],
            ObjMap(&SERVICE_ADDRESS),
        ),
        field("Meta", StrMap),
        field("Port", Int),
        field("Ports", Any),
        field("SocketPath", Str),
        field("Check", Obj(&CHECK_TYPE)),
        field("Checks", ObjList(&CHECK_TYPE)),
        field("Weights", Obj(&WEIGHTS)),
        field("Token", Str),
        aliased("EnableTagOverride", &["enable_tag_override"], Bool),
        field("Locality", Obj(&LOCALITY)),
        field("Proxy", Obj(&PROXY)),
        field("Connect", Obj(&SERVICE_CONNECT)),
    ],
);

// ---- The catalog ----

/// `structs.NodeService`: a catalog registration's `Service`.
pub static NODE_SERVICE: Schema = strict(
    "structs.NodeService",
    &[
        field("Kind", Str),
        field("ID", Str),
        field("Service", Str),
        field("Tags", StrList),
        field("Address", Str),
        field("TaggedAddresses", ObjMap(&SERVICE_ADDRESS)),
        field("Meta", StrMap),
        field("Port", Int),
        field("Ports", Any),
        field("SocketPath", Str),
        field("Weights", Obj(&WEIGHTS)),
        field("EnableTagOverride", Bool),
        field("Locality", Obj(&LOCALITY)),
        field("Proxy", Obj(&PROXY)),
        field("Connect", Obj(&SERVICE_CONNECT)),
        field("PeerName", Str),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.HealthCheckDefinition`: decoded by its own lenient `UnmarshalJSON`.
pub static HEALTH_CHECK_DEFINITION: Schema = lenient(
    "structs.HealthCheckDefinition",
    &[
        field("HTTP", Str),
        field("TLSServerName", Str),
        field("TLSSkipVerify", Bool),
        field("Header", StrListMap),
        field("Method", Str),
        field("Body", Str),
        field("DisableRedirects", Bool),
        field("TCP", Str),
        field("TCPUseTLS", Bool),
        field("UDP", Str),
        field("H2PING", Str),
        field("OSService", Str),
        field("H2PingUseTLS", Bool),
        field("Interval", Duration),
        field("OutputMaxSize", Int),
        field("Timeout", Duration),
        field("DeregisterCriticalServiceAfter", Duration),
        field("ScriptArgs", StrList),
        field("DockerContainerID", Str),
        field("Shell", Str),
        field("GRPC", Str),
        field("GRPCUseTLS", Bool),
        field("AliasNode", Str),
        field("AliasService", Str),
        field("TTL", Duration),
    ],
);

/// `structs.HealthCheck`: a catalog registration's `Check` and `Checks`.
pub static HEALTH_CHECK: Schema = strict(
    "structs.HealthCheck",
    &[
        field("Node", Str),
        field("CheckID", Str),
        field("Name", Str),
        field("Status", Str),
        field("Notes", Str),
        field("Output", Str),
        field("ServiceID", Str),
        field("ServiceName", Str),
        field("ServiceTags", StrList),
        field("Type", Str),
        field("Interval", Str),
        field("Timeout", Str),
        field("ExposedPort", Int),
        field("Definition", Obj(&HEALTH_CHECK_DEFINITION)),
        field("PeerName", Str),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.RegisterRequest`: `PUT /v1/catalog/register`.
pub static REGISTER_REQUEST: Schema = strict(
    "structs.RegisterRequest",
    &[
        field("Datacenter", Str),
        field("ID", Str),
        field("Node", Str),
        field("Address", Str),
        field("TaggedAddresses", StrMap),
        field("NodeMeta", StrMap),
        field("Service", Obj(&NODE_SERVICE)),
        field("Check", Obj(&HEALTH_CHECK)),
        field("Checks", ObjList(&HEALTH_CHECK)),
        field("SkipNodeUpdate", Bool),
        field("PeerName", Str),
        field("Locality", Obj(&LOCALITY)),
        field("Token", Str),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.DeregisterRequest`: `PUT /v1/catalog/deregister` (its `Address` is obsolete and
/// accepted on purpose).
pub static DEREGISTER_REQUEST: Schema = strict(
    "structs.DeregisterRequest",
    &[
        field("Datacenter", Str),
        field("Node", Str),
        field("ServiceID", Str),
        field("CheckID", Str),
        field("PeerName", Str),
        field("Address", Str),
        field("Token", Str),
    ],
);

pub static COORDINATE: Schema = strict(
    "coordinate.Coordinate",
    &[
        field("Vec", FloatList),
        field("Error", Float),
        field("Adjustment", Float),
        field("Height", Float),
    ],
);

/// `structs.CoordinateUpdateRequest`: `PUT /v1/coordinate/update`.
pub static COORDINATE_UPDATE: Schema = strict(
    "structs.CoordinateUpdateRequest",
    &[
        field("Datacenter", Str),
        field("Node", Str),
        field("Segment", Str),
        field("Coord", Obj(&COORDINATE)),
        field("Token", Str),
    ],
);

// ---- Sessions, transactions, prepared queries ----

pub static SERVICE_CHECK: Schema = lenient(
    "structs.ServiceCheck",
    &[field("ID", Str), field("Namespace", Str)],
);

/// `structs.Session`: `PUT /v1/session/create`. Its `UnmarshalJSON` ignores unknown keys.
pub static SESSION: Schema = lenient(
    "structs.Session",
    &[
        field("ID", Str),
        field("Name", Str),
        field("Node", Str),
        field("LockDelay", Duration),
        field("Behavior", Str),
        field("TTL", Str),
        field("NodeChecks", StrList),
        field("ServiceChecks", ObjList(&SERVICE_CHECK)),
        field("Checks", StrList),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

pub static TXN_KV: Schema = strict(
    "api.KVTxnOp",
    &[
        field("Verb", Str),
        field("Key", Str),
        field("Value", Bytes),
        field("Flags", Uint),
        field("Index", Uint),
        field("Session", Str),
        field("Namespace", Str),
        field("Partition", Str),
    ],
);

pub static API_NODE: Schema = strict(
    "api.Node",
    &[
        field("ID", Str),
        field("Node", Str),
        field("Address", Str),
        field("Datacenter", Str),
        field("TaggedAddresses", StrMap),
        field("Meta", StrMap),
        CREATE_INDEX,
        MODIFY_INDEX,
        field("Partition", Str),
        field("PeerName", Str),
        field("Locality", Obj(&LOCALITY)),
    ],
);

pub static API_SERVICE_CONNECT: Schema = strict(
    "api.AgentServiceConnect",
    &[field("Native", Bool), field("SidecarService", AnyObj)],
);

pub static API_AGENT_SERVICE: Schema = strict(
    "api.AgentService",
    &[
        field("Kind", Str),
        field("ID", Str),
        field("Service", Str),
        field("Tags", StrList),
        field("Meta", StrMap),
        field("Port", Int),
        field("Address", Str),
        field("SocketPath", Str),
        field("TaggedAddresses", ObjMap(&SERVICE_ADDRESS)),
        field("Weights", Obj(&WEIGHTS)),
        field("EnableTagOverride", Bool),
        CREATE_INDEX,
        MODIFY_INDEX,
        field("ContentHash", Str),
        field("Proxy", Obj(&PROXY)),
        field("Connect", Obj(&API_SERVICE_CONNECT)),
        field("PeerName", Str),
        field("Namespace", Str),
        field("Partition", Str),
        field("Datacenter", Str),
        field("Locality", Obj(&LOCALITY)),
    ],
);

pub static API_HEALTH_CHECK: Schema = strict(
    "api.HealthCheck",
    &[
        field("Node", Str),
        field("CheckID", Str),
        field("Name", Str),
        field("Status", Str),
        field("Notes", Str),
        field("Output", Str),
        field("ServiceID", Str),
        field("ServiceName", Str),
        field("ServiceTags", StrList),
        field("Type", Str),
        field("Namespace", Str),
        field("Partition", Str),
        field("ExposedPort", Int),
        field("PeerName", Str),
        field("Definition", Obj(&HEALTH_CHECK_DEFINITION)),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

pub static TXN_NODE: Schema = strict(
    "api.NodeTxnOp",
    &[field("Verb", Str), field("Node", Obj(&API_NODE))],
);

pub static TXN_SERVICE: Schema = strict(
    "api.ServiceTxnOp",
    &[
        field("Verb", Str),
        field("Node", Str),
        field("Service", Obj(&API_AGENT_SERVICE)),
    ],
);

pub static TXN_CHECK: Schema = strict(
    "api.CheckTxnOp",
    &[field("Verb", Str), field("Check", Obj(&API_HEALTH_CHECK))],
);

/// One element of `PUT /v1/txn`'s body (`api.TxnOps`, a list of these).
pub static TXN_OP: Schema = strict(
    "*api.TxnOp",
    &[
        field("KV", Obj(&TXN_KV)),
        field("Node", Obj(&TXN_NODE)),
        field("Service", Obj(&TXN_SERVICE)),
        field("Check", Obj(&TXN_CHECK)),
    ],
);

pub static QUERY_FAILOVER_TARGET: Schema = strict(
    "structs.QueryFailoverTarget",
    &[
        field("Peer", Str),
        field("Datacenter", Str),
        field("Partition", Str),
        field("Namespace", Str),
    ],
);

pub static QUERY_FAILOVER: Schema = strict(
    "structs.QueryFailoverOptions",
    &[
        field("NearestN", Int),
        field("Datacenters", StrList),
        field("Targets", ObjList(&QUERY_FAILOVER_TARGET)),
    ],
);

pub static SERVICE_QUERY: Schema = strict(
    "structs.ServiceQuery",
    &[
        field("Service", Str),
        field("SamenessGroup", Str),
        field("Failover", Obj(&QUERY_FAILOVER)),
        field("IgnoreCheckIDs", StrList),
        field("OnlyPassing", Bool),
        field("Near", Str),
        field("Tags", StrList),
        field("NodeMeta", StrMap),
        field("ServiceMeta", StrMap),
        field("Peer", Str),
        field("Connect", Bool),
    ],
);

pub static QUERY_TEMPLATE: Schema = strict(
    "structs.QueryTemplateOptions",
    &[
        field("Type", Str),
        field("Regexp", Str),
        field("RemoveEmptyTags", Bool),
    ],
);

pub static QUERY_DNS: Schema = strict("structs.QueryDNSOptions", &[field("TTL", Str)]);

/// `structs.PreparedQuery`: `POST /v1/query` and `PUT /v1/query/<id>`.
pub static PREPARED_QUERY: Schema = strict(
    "structs.PreparedQuery",
    &[
        field("ID", Str),
        field("Name", Str),
        field("Session", Str),
        field("Token", Str),
        field("Template", Obj(&QUERY_TEMPLATE)),
        field("Service", Obj(&SERVICE_QUERY)),
        field("DNS", Obj(&QUERY_DNS)),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

// ---- ACLs ----

pub static ACL_LINK: Schema = strict(
    "structs.ACLTokenPolicyLink",
    &[field("ID", Str), field("Name", Str)],
);

pub static ACL_SERVICE_IDENTITY: Schema = strict(
    "structs.ACLServiceIdentity",
    &[field("ServiceName", Str), field("Datacenters", StrList)],
);

pub static ACL_NODE_IDENTITY: Schema = strict(
    "structs.ACLNodeIdentity",
    &[field("NodeName", Str), field("Datacenter", Str)],
);

/// `structs.ACLTemplatedPolicyVariables`: also the body of a templated policy's preview.
pub static ACL_TEMPLATE_VARIABLES: Schema = strict(
    "structs.ACLTemplatedPolicyVariables",
    // Consul's JSON tag is lowercase; Go's errors print it so.
    &[field("name", Str)],
);

pub static ACL_TEMPLATED_POLICY: Schema = strict(
    "structs.ACLTemplatedPolicy",
    &[
        field("TemplateName", Str),
        field("TemplateVariables", Obj(&ACL_TEMPLATE_VARIABLES)),
        field("Datacenters", StrList),
    ],
);

/// `structs.ACLToken`: token create, update and clone.
pub static ACL_TOKEN: Schema = strict(
    "structs.ACLToken",
    &[
        field("AccessorID", Str),
        field("SecretID", Str),
        field("Description", Str),
        field("Policies", ObjList(&ACL_LINK)),
        field("Roles", ObjList(&ACL_LINK)),
        field("ServiceIdentities", ObjList(&ACL_SERVICE_IDENTITY)),
        field("NodeIdentities", ObjList(&ACL_NODE_IDENTITY)),
        field("TemplatedPolicies", ObjList(&ACL_TEMPLATED_POLICY)),
        field("Local", Bool),
        field("AuthMethod", Str),
        field("ExpirationTime", Str),
        field("ExpirationTTL", Duration),
        field("CreateTime", Str),
        field("Hash", Bytes),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.ACLPolicy`.
pub static ACL_POLICY: Schema = strict(
    "structs.ACLPolicy",
    &[
        field("ID", Str),
        field("Name", Str),
        field("Description", Str),
        field("Rules", Str),
        field("Datacenters", StrList),
        field("Hash", Bytes),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.ACLRole`.
pub static ACL_ROLE: Schema = strict(
    "structs.ACLRole",
    &[
        field("ID", Str),
        field("Name", Str),
        field("Description", Str),
        field("Policies", ObjList(&ACL_LINK)),
        field("ServiceIdentities", ObjList(&ACL_SERVICE_IDENTITY)),
        field("NodeIdentities", ObjList(&ACL_NODE_IDENTITY)),
        field("TemplatedPolicies", ObjList(&ACL_TEMPLATED_POLICY)),
        field("Hash", Bytes),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.ACLAuthMethod`.
pub static ACL_AUTH_METHOD: Schema = strict(
    "structs.ACLAuthMethod",
    &[
        field("Name", Str),
        field("Type", Str),
        field("DisplayName", Str),
        field("Description", Str),
        field("MaxTokenTTL", Duration),
        field("TokenLocality", Str),
        field("TokenNameFormat", Str),
        field("Config", AnyObj),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.ACLBindingRule`.
pub static ACL_BINDING_RULE: Schema = strict(
    "structs.ACLBindingRule",
    &[
        field("ID", Str),
        field("Description", Str),
        field("AuthMethod", Str),
        field("Selector", Str),
        field("BindType", Str),
        field("BindName", Str),
        field("BindVars", Obj(&ACL_TEMPLATE_VARIABLES)),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.ACLLoginParams`: `POST /v1/acl/login`.
pub static ACL_LOGIN: Schema = strict(
    "structs.ACLLoginParams",
    &[
        field("AuthMethod", Str),
        field("BearerToken", Str),
        field("Meta", StrMap),
    ],
);

/// The optional body of `PUT /v1/acl/bootstrap`: the secret the management token takes.
pub static ACL_BOOTSTRAP: Schema = strict(
    "agent.bootstrapSecretRequest",
    &[field("BootstrapSecret", Str)],
);

/// `api.AgentToken`: `PUT /v1/agent/token/<kind>`.
pub static AGENT_TOKEN: Schema = strict("api.AgentToken", &[field("Token", Str)]);

/// `agent.discoveryChainReadRequest`: the overrides a `POST /v1/discovery-chain/<name>`
/// compiles with.
pub static DISCOVERY_CHAIN_OVERRIDES: Schema = strict(
    "agent.discoveryChainReadRequest",
    &[
        aliased(
            "OverrideMeshGateway",
            &["override_mesh_gateway"],
            Obj(&MESH_GATEWAY),
        ),
        aliased("OverrideProtocol", &["override_protocol"], Any),
        aliased(
            "OverrideConnectTimeout",
            &["override_connect_timeout"],
            Duration,
        ),
    ],
);

// ---- Operator endpoints ----

/// `api.AutopilotConfiguration`: `PUT /v1/operator/autopilot/configuration`.
pub static AUTOPILOT_CONFIGURATION: Schema = strict(
    "api.AutopilotConfiguration",
    &[
        field("CleanupDeadServers", Bool),
        field("LastContactThreshold", Duration),
        field("MaxTrailingLogs", Uint),
        field("MinQuorum", Uint),
        field("ServerStabilizationTime", Duration),
        field("RedundancyZoneTag", Str),
        field("DisableUpgradeMigration", Bool),
        field("UpgradeVersionTag", Str),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `agent.keyringArgs`: the body of `/v1/operator/keyring` writes.
pub static KEYRING: Schema = strict(
    "agent.keyringArgs",
    &[
        field("Key", Str),
        field("Token", Str),
        field("RelayFactor", Uint),
        field("LocalOnly", Bool),
    ],
);

// ---- The mesh ----

/// `structs.CAConfiguration`: `PUT /v1/connect/ca/configuration` (the provider's `Config`
/// is the provider's to read).
pub static CA_CONFIGURATION: Schema = strict(
    "structs.CAConfiguration",
    &[
        field("ClusterID", Str),
        field("Provider", Str),
        field("Config", AnyObj),
        field("State", StrMap),
        field("ForceWithoutCrossSigning", Bool),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// `structs.ConnectAuthorizeRequest`: `POST /v1/agent/connect/authorize`.
pub static CONNECT_AUTHORIZE: Schema = strict(
    "structs.ConnectAuthorizeRequest",
    &[
        field("Target", Str),
        field("ClientCertURI", Str),
        field("ClientCertSerial", Str),
    ],
);

/// `structs.Intention`: the ID-based intention endpoints and `/v1/connect/intentions/exact`.
pub static INTENTION: Schema = strict(
    "structs.Intention",
    &[
        field("ID", Str),
        field("Description", Str),
        field("SourceNS", Str),
        field("SourceName", Str),
        field("DestinationNS", Str),
        field("DestinationName", Str),
        field("SourcePartition", Str),
        field("DestinationPartition", Str),
        field("SourcePeer", Str),
        field("SourceSamenessGroup", Str),
        field("SourceType", Str),
        field("Action", Str),
        field("Permissions", Any),
        field("Precedence", Int),
        field("CreatedAt", Str),
        field("UpdatedAt", Str),
        field("Meta", StrMap),
        field("Hash", Bytes),
        CREATE_INDEX,
        MODIFY_INDEX,
    ],
);

/// Renames the keys of a definition written in config-file syntax (`socket_path`,
/// `success_before_passing`, a service check's `id`) to the names Consul's HTTP decoder
/// takes, through the schema's nested structs, so the definition can be sent to the API.
/// Consul's CLI gets there by decoding the file into its config structs and sending the
/// API's; a key no field names stays as it is (and the API refuses it). Opaque maps
/// (`Meta`, `Proxy.Config`) keep their keys.
pub fn to_api_names(value: &mut serde_json::Value, schema: &'static Schema) {
    let serde_json::Value::Object(map) = value else {
        return;
    };
    let taken: Vec<String> = map.keys().cloned().collect();
    for key in taken {
        let normalized = super::body::normalize_key(&key);
        // A service check's `id` in a config file is its `CheckID`.
        let field = if std::ptr::eq(schema, &CHECK_TYPE) && normalized == "id" {
            schema.field("CheckID")
        } else {
            schema.fields.iter().find(|f| {
                super::body::normalize_key(f.name) == normalized
                    || f.aliases
                        .iter()
                        .any(|a| super::body::normalize_key(a) == normalized)
            })
        };
        let Some(field) = field else { continue };
        let Some(mut inner) = map.remove(&key) else {
            continue;
        };
        match (field.kind, &mut inner) {
            (Obj(nested), _) => to_api_names(&mut inner, nested),
            (ObjList(nested), serde_json::Value::Array(items)) => {
                items.iter_mut().for_each(|item| to_api_names(item, nested))
            }
            (ObjList(nested), serde_json::Value::Object(_)) => to_api_names(&mut inner, nested),
            (ObjMap(nested), serde_json::Value::Object(entries)) => entries
                .values_mut()
                .for_each(|item| to_api_names(item, nested)),
            _ => {}
        }
        map.insert(field.name.to_string(), inner);
    }
}

// ---- Cluster peering (the client library's `api.*`, decoded by `lib.DecodeJSON`) ----

pub static PEERING_GENERATE_TOKEN_REQUEST: Schema = strict(
    "api.PeeringGenerateTokenRequest",
    &[
        field("PeerName", Str),
        field("Partition", Str),
        field("Meta", StrMap),
        field("ServerExternalAddresses", StrList),
    ],
);

pub static PEERING_ESTABLISH_REQUEST: Schema = strict(
    "api.PeeringEstablishRequest",
    &[
        field("PeerName", Str),
        field("PeeringToken", Str),
        field("Partition", Str),
        field("Meta", StrMap),
    ],
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::body::{check_strict, parse_strict};
    use serde_json::json;

    fn refusal(value: serde_json::Value, schema: &'static Schema) -> String {
        check_strict(&value, Obj(schema)).unwrap_err()
    }

    #[test]
    fn unknown_fields_are_refused_by_their_key() {
        assert_eq!(
            refusal(json!({"Name": "web", "Foo": 1}), &SERVICE_DEFINITION),
            r#"json: unknown field "Foo""#
        );
        assert_eq!(
            refusal(
                json!({"Name": "web", "Check": {"TTL": "10s", "Bogus": true}}),
                &SERVICE_DEFINITION
            ),
            r#"json: unknown field "Bogus""#
        );
        // Consul's community edition has no namespaces.
        assert_eq!(
            refusal(
                json!({"Name": "web", "Namespace": "default"}),
                &SERVICE_DEFINITION
            ),
            r#"json: unknown field "Namespace""#
        );
        // A session's decoder ignores what it does not know.
        assert!(check_strict(&json!({"Name": "s", "Foo": 1}), Obj(&SESSION)).is_ok());
    }

    #[test]
    fn every_spelling_consul_accepts_is_accepted() {
        let body = json!({
            "name": "web", "ID": "web-1", "PORT": 80, "enable_tag_override": true,
            "tagged_addresses": {"lan": {"address": "10.0.0.1", "port": 80}},
            "checks": [{"ttl": "10s", "deregister_critical_service_after": "1m",
                        "tls_skip_verify": true, "service_id": "x", "args": ["a"]}],
            "connect": {"sidecar_service": {"proxy": {"upstreams": [
                {"destination_name": "db", "local_bind_port": 9191}]}}},
        });
        check_strict(&body, Obj(&SERVICE_DEFINITION)).unwrap();
        // The snake-case twins exist only where Consul declares them.
        assert_eq!(
            refusal(
                json!({"Service": {"enable_tag_override": true}}),
                &REGISTER_REQUEST
            ),
            r#"json: unknown field "enable_tag_override""#
        );
    }

    #[test]
    fn wrong_types_are_worded_as_go_words_them() {
        assert_eq!(
            refusal(json!({"Name": "web", "Port": "80"}), &SERVICE_DEFINITION),
            "json: cannot unmarshal string into Go struct field ServiceDefinition.Port of type int"
        );
        assert_eq!(
            refusal(json!({"Name": "web", "Port": 1.5}), &SERVICE_DEFINITION),
            "json: cannot unmarshal number 1.5 into Go struct field ServiceDefinition.Port of type int"
        );
        assert_eq!(
            refusal(json!({"Name": "web", "Tags": "a"}), &SERVICE_DEFINITION),
            "json: cannot unmarshal string into Go struct field ServiceDefinition.Tags of type []string"
        );
        assert_eq!(
            refusal(json!({"Weights": {"Passing": true}}), &SERVICE_DEFINITION),
            "json: cannot unmarshal bool into Go struct field Weights.Weights.Passing of type int"
        );
        assert_eq!(
            refusal(json!({"Check": {"TTL": "soon"}}), &SERVICE_DEFINITION),
            r#"time: invalid duration "soon""#
        );
        assert_eq!(
            check_strict(&json!({"Verb": "get"}), ObjList(&TXN_OP)).unwrap_err(),
            "json: cannot unmarshal object into Go value of type *api.TxnOp"
        );
        assert!(parse_strict(b"[1]", &SERVICE_DEFINITION)
            .unwrap_err()
            .contains("Go value of type structs.ServiceDefinition"));
    }

    #[test]
    fn config_file_names_become_the_api_s() {
        let mut definition = json!({
            "name": "web", "socket_path": "/run/web.sock", "enable_tag_override": true,
            "meta": {"socket_path": "kept"},
            "checks": [{"id": "c1", "ttl": "10s", "success_before_passing": 2, "os_service": "x"}],
            "connect": {"sidecar_service": {"proxy": {"upstreams": [
                {"destination_name": "db", "local_bind_port": 9191}]}}},
        });
        to_api_names(&mut definition, &SERVICE_DEFINITION);
        check_strict(&definition, Obj(&SERVICE_DEFINITION)).unwrap();
        assert_eq!(definition["SocketPath"], "/run/web.sock");
        assert_eq!(definition["Meta"], json!({"socket_path": "kept"}));
        assert_eq!(definition["Checks"][0]["CheckID"], "c1");
        assert_eq!(definition["Checks"][0]["SuccessBeforePassing"], 2);
        assert_eq!(
            definition["Connect"]["SidecarService"]["Proxy"]["Upstreams"][0]["LocalBindPort"],
            9191
        );
    }

    #[test]
    fn nulls_and_empty_bodies_pass() {
        check_strict(
            &json!({"Name": null, "Check": null}),
            Obj(&SERVICE_DEFINITION),
        )
        .unwrap();
        assert_eq!(parse_strict(b"", &SERVICE_DEFINITION).unwrap(), json!({}));
    }
}
