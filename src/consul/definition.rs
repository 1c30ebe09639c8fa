//! Service and check definitions as an agent receives them: from `/v1/agent/service/register`
//! and `/v1/agent/check/register` bodies, and from `service`/`services`/`checks` in config
//! files. One decoder serves both, with Consul's lenient field names (`enable_tag_override`
//! and `EnableTagOverride` alike), its defaults (service ID = name, check IDs
//! `service:<id>[:n]`, names `Service '<name>' check`) and its validation messages.

use crate::consul::body::Obj;
use crate::consul::config_entry::doc::{always, decode_object, omit, Decoding, Doc, Ty, F};
use crate::consul::registration::{
    is_any_address, parse_check_definition, parse_service_tagged_addresses, parse_weights,
    validate_service_meta, SERVICE_TAGS_MAX,
};
use crate::store::catalog::{CheckDefinition, ServiceRegistration, Status, Weights};
use std::time::Duration;

/// Consul's floor for check intervals; shorter intervals are raised to it.
pub const CHECK_INTERVAL_MIN: Duration = Duration::from_secs(1);
/// Timeout of HTTP, TCP, UDP and gRPC probes when none is given (Consul's default).
pub const CHECK_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Consul's cap on captured check output (`output_max_size` default).
pub const CHECK_OUTPUT_BYTES_MAX: usize = 4096;
/// Most checks one service definition may carry.
pub const SERVICE_CHECKS_MAX: usize = 64;

/// How a check is evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CheckKind {
    Http,
    Tcp,
    Udp,
    Grpc,
    Ttl,
    Script,
    Alias,
    /// An HTTP/2 PING (`H2PING`), over TLS unless `H2PingUseTLS` is false.
    H2ping,
}

impl CheckKind {
    /// Consul's `Type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::Http => "http",
            CheckKind::Tcp => "tcp",
            CheckKind::Udp => "udp",
            CheckKind::Grpc => "grpc",
            CheckKind::Ttl => "ttl",
            CheckKind::Script => "script",
            CheckKind::Alias => "alias",
            CheckKind::H2ping => "h2ping",
        }
    }
}

/// A check as the agent runs it (serializable: the agent persists it across restarts).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CheckSpec {
    pub id: String,
    pub name: String,
    pub notes: String,
    pub service_id: String,
    /// The status the check starts in (Consul: critical unless given).
    pub initial_status: Status,
    /// Output to start with (Consul sets none; TTL checks keep their last note).
    pub initial_output: String,
    pub kind: CheckKind,
    pub definition: CheckDefinition,
    pub success_before_passing: u32,
    pub failures_before_warning: u32,
    pub failures_before_critical: u32,
}

impl CheckSpec {
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.definition.interval_ns.max(0) as u64).max(CHECK_INTERVAL_MIN)
    }
    pub fn timeout(&self) -> Duration {
        match self.definition.timeout_ns {
            n if n > 0 => Duration::from_nanos(n as u64),
            _ => CHECK_TIMEOUT_DEFAULT,
        }
    }
    pub fn ttl(&self) -> Duration {
        Duration::from_nanos(self.definition.ttl_ns.max(0) as u64)
    }
    pub fn output_max_bytes(&self) -> usize {
        match self.definition.output_max_size {
            0 => CHECK_OUTPUT_BYTES_MAX,
            n => (n as usize).min(1 << 20),
        }
    }
    pub fn deregister_critical_after(&self) -> Option<Duration> {
        (self.definition.deregister_critical_service_after_ns > 0).then(|| {
            Duration::from_nanos(self.definition.deregister_critical_service_after_ns as u64)
        })
    }
}

/// A service with its checks.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceDefinition {
    pub service: ServiceRegistration,
    pub checks: Vec<CheckSpec>,
    /// `Connect.SidecarService` as given: the agent allocates a port if it names none and
    /// expands it with [`expand_sidecar`].
    pub sidecar: Option<serde_json::Value>,
}

/// The `Proxy` of a connect proxy, in Consul's field names and order.
const PROXY_MESH_GATEWAY: &[F] = &[omit("Mode", Ty::Str)];
const PROXY_EXPOSE_PATH: &[F] = &[
    omit("ListenerPort", Ty::Int),
    omit("Path", Ty::Str),
    omit("LocalPathPort", Ty::Int),
    omit("Protocol", Ty::Str),
];
const PROXY_EXPOSE: &[F] = &[
    omit("Checks", Ty::Bool),
    omit("Paths", Ty::ObjList(PROXY_EXPOSE_PATH)),
];
const PROXY_UPSTREAM: &[F] = &[
    always("DestinationType", Ty::Str),
    always("DestinationName", Ty::Str),
    omit("DestinationPeer", Ty::Str),
    omit("Datacenter", Ty::Str),
    omit("LocalBindAddress", Ty::Str),
    omit("LocalBindPort", Ty::Int),
    omit("LocalBindSocketPath", Ty::Str),
    omit("LocalBindSocketMode", Ty::Str),
    omit("Config", Ty::OpaqueMap),
    omit("MeshGateway", Ty::Obj(PROXY_MESH_GATEWAY)),
    omit("CentrallyConfigured", Ty::Bool),
];
const PROXY: &[F] = &[
    omit("DestinationServiceName", Ty::Str),
    omit("DestinationServiceID", Ty::Str),
    omit("LocalServiceAddress", Ty::Str),
    omit("LocalServicePort", Ty::Int),
    omit("LocalServiceSocketPath", Ty::Str),
    always("Mode", Ty::Str),
    omit("Config", Ty::OpaqueMap),
    omit("Upstreams", Ty::ObjList(PROXY_UPSTREAM)),
    omit("MeshGateway", Ty::Obj(PROXY_MESH_GATEWAY)),
    omit("Expose", Ty::Obj(PROXY_EXPOSE)),
    omit("TransparentProxy", Ty::OpaqueMap),
    omit("AccessLogs", Ty::OpaqueMap),
];

/// A `Proxy` object in Consul's canonical form (field names, order, an upstream's
/// `DestinationType` defaulting to `service`); unknown keys are dropped, as Consul's
/// decoder ignores them.
/// The service kinds that are gateways (Consul's `IsGateway`).
pub const GATEWAY_KINDS: [&str; 4] = [
    "mesh-gateway",
    "terminating-gateway",
    "ingress-gateway",
    "api-gateway",
];

/// Consul's gateway rules for a registration of a gateway `kind`: a port (ingress and API
/// gateways listen on their entry's ports instead), no sidecar, and none of the proxy
/// fields that name a service behind a proxy. The first broken rule, in Consul's words.
pub fn validate_gateway(
    kind: &str,
    port: i32,
    proxy: Option<&Doc>,
    has_sidecar: bool,
) -> Result<(), String> {
    debug_assert!(GATEWAY_KINDS.contains(&kind), "only gateways");
    if port == 0 && kind != "ingress-gateway" && kind != "api-gateway" {
        return Err(format!("Port must be non-zero for a {kind}"));
    }
    if has_sidecar {
        return Err(format!("A {kind} cannot have a sidecar service defined"));
    }
    let Some(proxy) = proxy else {
        return Ok(());
    };
    for field in [
        "DestinationServiceName",
        "DestinationServiceID",
        "LocalServiceAddress",
        "LocalServiceSocketPath",
    ] {
        if !proxy.str(field).is_empty() {
            return Err(format!(
                "The Proxy.{field} configuration is invalid for a {kind}"
            ));
        }
    }
    if proxy.int("LocalServicePort") != 0 {
        return Err(format!(
            "The Proxy.LocalServicePort configuration is invalid for a {kind}"
        ));
    }
    if matches!(proxy.get("Upstreams"), Some(Doc::List(list)) if !list.is_empty()) {
        return Err(format!(
            "The Proxy.Upstreams configuration is invalid for a {kind}"
        ));
    }
    Ok(())
}

pub fn normalize_proxy(value: &serde_json::Value) -> Result<Doc, String> {
    let mut decoding = Decoding::default();
    let mut doc = decode_object(value, PROXY, "Proxy", &mut decoding);
    if !decoding.type_errors.is_empty() {
        return decoding.into_result().map(|_| doc);
    }
    if let Some(Doc::List(upstreams)) = doc.get("Upstreams").cloned() {
        let upstreams = upstreams
            .into_iter()
            .map(|mut u| {
                if u.str("DestinationType").is_empty() {
                    u.set("DestinationType", Doc::Str("service".to_string()));
                }
                u
            })
            .collect();
        doc.set("Upstreams", Doc::List(upstreams));
    }
    Ok(doc)
}

/// The ID Consul gives the sidecar of service `id`.
pub fn sidecar_id(id: &str) -> String {
    format!("{id}-sidecar-proxy")
}

/// Expands `Connect.SidecarService` (`raw`) of `parent` into the sidecar's definition with
/// Consul's defaults: ID `<id>-sidecar-proxy`, name `<name>-sidecar-proxy`, kind
/// `connect-proxy`, the parent's tags and meta unless given, `port` unless given, a `Proxy`
/// fronting the parent (`LocalServiceAddress` 127.0.0.1, `LocalServicePort` the parent's
/// port), and unless checks are given, a TCP check on the proxy's port ("Connect Sidecar
/// Listening", every 10 s) and an alias check of the parent.
pub fn expand_sidecar(
    parent: &ServiceRegistration,
    raw: &serde_json::Value,
    port: u16,
) -> Result<ServiceDefinition, DefinitionError> {
    use serde_json::{json, Value};
    let sidecar = Obj::new(raw).map_err(decode_failed)?;
    validate_sidecar_shape(&sidecar)?;
    let mut body = raw.as_object().cloned().unwrap_or_default();
    let mut set_default = |key: &str, value: Value| {
        if !sidecar.has(&[key]) {
            body.insert(key.to_string(), value);
        }
    };
    set_default("id", json!(sidecar_id(&parent.id)));
    set_default("name", json!(format!("{}-sidecar-proxy", parent.name)));
    if !parent.tags.is_empty() {
        set_default("tags", json!(parent.tags));
    }
    if !parent.meta.is_empty() {
        let meta: serde_json::Map<String, Value> = parent
            .meta
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        set_default("meta", Value::Object(meta));
    }
    let given_port = sidecar
        .bounded(&["port"], 0, 65535)
        .map_err(decode_failed)?;
    let port = if given_port > 0 {
        given_port as u16
    } else {
        port
    };
    body.retain(|k, _| {
        crate::consul::body::normalize_key(k) != "port"
            && crate::consul::body::normalize_key(k) != "kind"
    });
    body.insert("Port".into(), json!(port));
    body.insert("Kind".into(), json!("connect-proxy"));
    let proxy = sidecar_proxy(&sidecar, parent);
    body.retain(|k, _| crate::consul::body::normalize_key(k) != "proxy");
    body.insert("Proxy".into(), proxy);
    let has_checks = sidecar.has(&["check"]) || sidecar.has(&["checks"]);
    let sidecar_address = sidecar.string(&["address"]).map_err(decode_failed)?;
    if !has_checks {
        body.insert(
            "Checks".into(),
            sidecar_default_checks(sidecar_address, port, parent),
        );
    }
    let definition =
        parse_service_definition(&Obj::new(&Value::Object(body)).map_err(decode_failed)?)?;
    Ok(definition)
}

/// A sidecar is a plain `connect-proxy`: it cannot nest a sidecar of its own nor be another kind.
fn validate_sidecar_shape(sidecar: &Obj) -> Result<(), DefinitionError> {
    if sidecar.has(&["sidecarservice"])
        || sidecar
            .obj(&["connect"])
            .ok()
            .flatten()
            .is_some_and(|c| c.has(&["sidecarservice"]))
    {
        return Err(DefinitionError::bad(
            "Invalid SidecarService: sidecar_service can't have a nested sidecar_service",
        ));
    }
    let kind = sidecar.string(&["kind"]).map_err(decode_failed)?;
    if !kind.is_empty() && kind != "connect-proxy" {
        return Err(DefinitionError::bad(format!(
            "Invalid SidecarService: sidecar_service can't specify a Kind other than connect-proxy, got {kind:?}"
        )));
    }
    Ok(())
}

/// The sidecar's `Proxy` block: what was given, with the local service defaulting to the parent
/// on loopback, and the destination always the parent.
fn sidecar_proxy(sidecar: &Obj, parent: &ServiceRegistration) -> serde_json::Value {
    use crate::consul::body::normalize_key;
    use serde_json::{json, Value};
    let mut proxy = match sidecar.get(&["proxy"]) {
        Some(Value::Object(p)) => Value::Object(p.clone()),
        _ => json!({}),
    };
    let proxy_obj = proxy.as_object_mut().expect("an object");
    let mut proxy_default = |key: &str, value: Value| {
        let present = proxy_obj
            .keys()
            .any(|k| normalize_key(k) == normalize_key(key));
        if !present {
            proxy_obj.insert(key.to_string(), value);
        }
    };
    proxy_default("LocalServiceAddress", json!("127.0.0.1"));
    proxy_default("LocalServicePort", json!(parent.port));
    // The destination is always the parent, whatever was given.
    proxy_obj.retain(|k, _| {
        let key = normalize_key(k);
        key != "destinationservicename" && key != "destinationserviceid"
    });
    proxy_obj.insert("DestinationServiceName".into(), json!(parent.name));
    proxy_obj.insert("DestinationServiceID".into(), json!(parent.id));
    proxy
}

/// Consul's two checks for a sidecar that names none: a TCP probe of its listener and an alias
/// of the parent service.
fn sidecar_default_checks(
    sidecar_address: String,
    port: u16,
    parent: &ServiceRegistration,
) -> serde_json::Value {
    let check_address = if sidecar_address.is_empty() {
        "127.0.0.1".to_string()
    } else {
        sidecar_address
    };
    let tcp = if check_address.contains(':') {
        format!("[{check_address}]:{port}")
    } else {
        format!("{check_address}:{port}")
    };
    serde_json::json!([
        {"Name": "Connect Sidecar Listening", "TCP": tcp, "Interval": "10s"},
        {"Name": format!("Connect Sidecar Aliasing {}", parent.id), "AliasService": parent.id},
    ])
}

/// A decoding or validation failure, with the status Consul answers it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefinitionError {
    pub status: u16,
    pub message: String,
}

impl DefinitionError {
    fn bad(message: impl Into<String>) -> Self {
        DefinitionError {
            status: 400,
            message: message.into(),
        }
    }
}

fn decode_failed(e: String) -> DefinitionError {
    DefinitionError::bad(format!("Request decode failed: {e}"))
}

/// Consul's `CheckType.Validate`, then the kind the definition describes.
fn check_kind(def: &CheckDefinition) -> Result<CheckKind, String> {
    let interval_check = !def.script_args.is_empty()
        || !def.http.is_empty()
        || !def.tcp.is_empty()
        || !def.udp.is_empty()
        || !def.grpc.is_empty()
        || !def.h2ping.is_empty()
        || !def.os_service.is_empty();
    let alias = !def.alias_node.is_empty() || !def.alias_service.is_empty();
    if def.interval_ns > 0 && def.ttl_ns > 0 {
        return Err("Interval and TTL cannot both be specified".into());
    }
    if interval_check && def.interval_ns <= 0 {
        return Err(
            "Interval must be > 0 for Script, HTTP, H2PING, TCP, UDP or OSService checks".into(),
        );
    }
    if interval_check && alias {
        return Err("Interval cannot be set for Alias checks".into());
    }
    if alias && def.ttl_ns > 0 {
        return Err("TTL must be not be set for Alias checks".into());
    }
    if !interval_check && !alias && def.ttl_ns <= 0 {
        return Err("TTL must be > 0 for TTL checks".into());
    }
    Ok(if !def.grpc.is_empty() {
        CheckKind::Grpc
    } else if !def.http.is_empty() {
        CheckKind::Http
    } else if !def.tcp.is_empty() {
        CheckKind::Tcp
    } else if !def.udp.is_empty() {
        CheckKind::Udp
    } else if !def.script_args.is_empty() {
        CheckKind::Script
    } else if alias {
        CheckKind::Alias
    } else if !def.h2ping.is_empty() {
        CheckKind::H2ping
    } else if !def.os_service.is_empty() {
        // Consul checks OS services through the Windows service manager only; its agent on
        // any other platform refuses such a check when it adds it (`OSServiceClient` "not
        // implemented"), after the definition validated, and answers the error with 500.
        return Err(OS_SERVICE_UNSUPPORTED.into());
    } else {
        CheckKind::Ttl
    })
}

/// Consul's refusal of an `OSService` check outside Windows.
pub const OS_SERVICE_UNSUPPORTED: &str = "not implemented";

fn threshold(obj: &Obj, names: &[&str]) -> Result<u32, String> {
    Ok(obj.bounded(names, 0, u32::MAX as i64)? as u32)
}

/// Decodes one check definition (Consul's `CheckType`/`CheckDefinition`). `service_id`
/// fills `ServiceID` for checks nested in a service.
pub fn parse_check(obj: &Obj, service_id: Option<&str>) -> Result<CheckSpec, DefinitionError> {
    let mut definition = parse_check_definition(obj).map_err(decode_failed)?;
    if !definition.h2ping.is_empty() && !obj.has(&["h2pingusetls"]) {
        // Consul's `CheckType` defaults `H2PingUseTLS` to true for an H2PING check.
        definition.h2ping_use_tls = true;
    }
    let kind = check_kind(&definition).map_err(|e| match e.as_str() {
        OS_SERVICE_UNSUPPORTED => DefinitionError {
            status: 500,
            message: e,
        },
        _ => DefinitionError::bad(format!("Invalid check: {e}")),
    })?;
    let status = obj.string(&["status"]).map_err(decode_failed)?;
    let initial_status = match status.as_str() {
        "" => Status::Critical,
        "passing" => Status::Passing,
        "warning" => Status::Warning,
        "critical" => Status::Critical,
        _ => {
            return Err(DefinitionError::bad(
                "Status for checks must 'passing', 'warning', 'critical'",
            ))
        }
    };
    let failures_before_critical =
        threshold(obj, &["failuresbeforecritical"]).map_err(decode_failed)?;
    let failures_before_warning = match obj
        .opt_i64(&["failuresbeforewarning"])
        .map_err(decode_failed)?
    {
        Some(n) if n >= 0 => n as u32,
        Some(_) => {
            return Err(DefinitionError::bad(
                "FailuresBeforeWarning must not be negative",
            ))
        }
        None => failures_before_critical,
    };
    if failures_before_warning > failures_before_critical {
        return Err(DefinitionError::bad(
            "Invalid check: FailuresBeforeWarning must be less than or equal to FailuresBeforeCritical",
        ));
    }
    let explicit_service = obj.string(&["serviceid"]).map_err(decode_failed)?;
    Ok(CheckSpec {
        id: obj.string(&["checkid", "id"]).map_err(decode_failed)?,
        name: obj.string(&["name"]).map_err(decode_failed)?,
        notes: obj.string(&["notes"]).map_err(decode_failed)?,
        service_id: match service_id {
            Some(id) => id.to_string(),
            None => explicit_service,
        },
        initial_status,
        initial_output: String::new(),
        kind,
        definition,
        success_before_passing: threshold(obj, &["successbeforepassing"]).map_err(decode_failed)?,
        failures_before_warning,
        failures_before_critical,
    })
}

/// Decodes a service definition (Consul's `ServiceDefinition`) with its checks. The fields are
/// decoded and validated in Consul's order, so the first error reported is Consul's.
pub fn parse_service_definition(obj: &Obj) -> Result<ServiceDefinition, DefinitionError> {
    let name = obj.string(&["name", "service"]).map_err(decode_failed)?;
    if name.is_empty() {
        return Err(DefinitionError::bad("Missing service name"));
    }
    let address = obj.string(&["address"]).map_err(decode_failed)?;
    if is_any_address(&address) {
        return Err(DefinitionError::bad("Invalid service address"));
    }
    let meta = obj.str_map(&["meta"]).map_err(decode_failed)?;
    let kind = obj.string(&["kind"]).map_err(decode_failed)?;
    validate_service_meta(&kind, &meta)
        .map_err(|e| DefinitionError::bad(format!("Invalid Service Meta: {e}")))?;
    let weights = parse_weights(obj).map_err(decode_failed)?;
    validate_weights(weights.as_ref())?;
    let tags = obj.str_list(&["tags"]).map_err(decode_failed)?;
    if tags.len() > SERVICE_TAGS_MAX {
        return Err(DefinitionError::bad(format!(
            "a service may carry at most {SERVICE_TAGS_MAX} tags"
        )));
    }
    let mut id = obj.string(&["id"]).map_err(decode_failed)?;
    if id.is_empty() {
        id = name.clone();
    }
    let port = obj.bounded(&["port"], 0, 65535).map_err(decode_failed)? as i32;
    let proxy = match obj.get(&["proxy"]) {
        Some(value) if value.as_object().is_some_and(|m| !m.is_empty()) => {
            Some(normalize_proxy(value).map_err(decode_failed)?)
        }
        _ => None,
    };
    if kind == "connect-proxy" {
        validate_connect_proxy(obj, proxy.as_ref(), port)?;
    }
    let (connect_native, sidecar) = parse_connect(obj, &kind)?;
    if GATEWAY_KINDS.contains(&kind.as_str()) {
        validate_gateway(&kind, port, proxy.as_ref(), sidecar.is_some())
            .map_err(|e| DefinitionError::bad(format!("Validation failed: {e}")))?;
    }
    let proxy_json = proxy.map(|p| p.to_json());
    let mut tagged_addresses = parse_service_tagged_addresses(obj).map_err(decode_failed)?;
    add_default_tagged_addresses(&mut tagged_addresses, &address, port);
    let service = ServiceRegistration {
        kind,
        id: id.clone(),
        name: name.clone(),
        tags,
        address,
        tagged_addresses,
        meta,
        port,
        weights,
        enable_tag_override: obj.bool(&["enabletagoverride"]).map_err(decode_failed)?,
        socket_path: obj.string(&["socketpath"]).map_err(decode_failed)?,
        proxy_json,
        connect_native,
    };
    let checks = parse_service_checks(obj, &id, &name)?;
    Ok(ServiceDefinition {
        service,
        checks,
        sidecar,
    })
}

/// Consul's bounds on a service's DNS weights: `Passing` at least 1, both at most 65535.
fn validate_weights(weights: Option<&Weights>) -> Result<(), DefinitionError> {
    let Some(w) = weights else {
        return Ok(());
    };
    if w.passing < 1 {
        return Err(DefinitionError::bad(
            "Invalid Weights: Passing must be greater than 0",
        ));
    }
    if w.passing > 65535 || w.warning > 65535 {
        return Err(DefinitionError::bad(
            "Invalid Weights: DNS Weight must be between 0 and 65535",
        ));
    }
    Ok(())
}

/// A `connect-proxy` names the service it fronts and has somewhere to listen.
fn validate_connect_proxy(
    obj: &Obj,
    proxy: Option<&Doc>,
    port: i32,
) -> Result<(), DefinitionError> {
    if proxy.is_none_or(|p| p.str("DestinationServiceName").is_empty()) {
        return Err(DefinitionError::bad(
            "Validation failed: Proxy.DestinationServiceName must be non-empty for Connect proxy services",
        ));
    }
    if port == 0
        && obj
            .string(&["socketpath"])
            .map_err(decode_failed)?
            .is_empty()
    {
        return Err(DefinitionError::bad(
            "Validation failed: Port or SocketPath must be set for a Connect proxy",
        ));
    }
    if let Some(proxy) = proxy {
        validate_expose(proxy)
            .map_err(|e| DefinitionError::bad(format!("Validation failed: {e}")))?;
    }
    Ok(())
}

/// The protocols an exposed path may speak, in the order Consul lists them.
const EXPOSE_PROTOCOLS: [&str; 2] = ["http", "http2"];

/// Consul's rules for `Proxy.Expose.Paths` of a connect proxy, checked in its order (the
/// first broken one, in its words): a path is given, no two paths share a listener port,
/// the listener port is a port, the protocol (any case) is `http` or `http2` when given.
/// Consul checks neither the path's leading `/` nor `LocalPathPort` here, and neither
/// does praetor: Envoy matches a path without the slash against nothing.
fn validate_expose(proxy: &Doc) -> Result<(), String> {
    let Some(expose) = proxy.get("Expose") else {
        return Ok(());
    };
    let mut listener_ports = std::collections::BTreeSet::new();
    for path in expose.list("Paths") {
        if path.str("Path").is_empty() {
            return Err("expose.paths: empty path exposed".to_string());
        }
        let listener_port = path.int("ListenerPort");
        if !listener_ports.insert(listener_port) {
            return Err("expose.paths: duplicate listener ports exposed".to_string());
        }
        if !(1..=65535).contains(&listener_port) {
            return Err(format!(
                "expose.paths: invalid listener port: {listener_port}"
            ));
        }
        let protocol = path.str("Protocol").to_lowercase();
        if !protocol.is_empty() && !EXPOSE_PROTOCOLS.contains(&protocol.as_str()) {
            return Err(format!(
                "protocol '{protocol}' not supported for path: {}, must be in: [{}]",
                path.str("Path"),
                EXPOSE_PROTOCOLS.join(" ")
            ));
        }
    }
    Ok(())
}

/// The `Connect` block: whether the service is Connect-native, and its sidecar definition (kept
/// raw; `expand_sidecar` fills it in once the agent allocates a port).
fn parse_connect(
    obj: &Obj,
    kind: &str,
) -> Result<(bool, Option<serde_json::Value>), DefinitionError> {
    let Some(connect) = obj.obj(&["connect"]).map_err(decode_failed)? else {
        return Ok((false, None));
    };
    let native = connect.bool(&["native"]).map_err(decode_failed)?;
    let sidecar = match connect.get(&["sidecarservice"]) {
        Some(value @ serde_json::Value::Object(_)) => Some(value.clone()),
        None | Some(serde_json::Value::Null) => None,
        Some(_) => {
            return Err(decode_failed(
                "Connect.SidecarService must be an object".to_string(),
            ))
        }
    };
    if native && sidecar.is_some() {
        return Err(DefinitionError::bad(
            "Invalid Connect configuration: Native cannot be combined with SidecarService",
        ));
    }
    if kind == "connect-proxy" && sidecar.is_some() {
        return Err(DefinitionError::bad(
            "Invalid Connect configuration: a connect-proxy cannot have a SidecarService",
        ));
    }
    Ok((native, sidecar))
}

/// Consul gives a service with an IP address default LAN and WAN tagged addresses of its
/// family, unless the definition tagged those itself.
fn add_default_tagged_addresses(
    tagged_addresses: &mut Vec<(String, String, i32)>,
    address: &str,
    port: i32,
) {
    let Ok(ip) = address.parse::<std::net::IpAddr>() else {
        return;
    };
    let family = if ip.is_ipv4() { "ipv4" } else { "ipv6" };
    for tag in [format!("lan_{family}"), format!("wan_{family}")] {
        if !tagged_addresses.iter().any(|(t, _, _)| *t == tag) {
            tagged_addresses.push((tag, address.to_string(), port));
        }
    }
}

/// The service's `Check` and `Checks`, with Consul's default IDs (`service:<id>`, numbered
/// `service:<id>:<n>` when there are several) and names.
fn parse_service_checks(
    obj: &Obj,
    id: &str,
    name: &str,
) -> Result<Vec<CheckSpec>, DefinitionError> {
    let mut check_objects = Vec::new();
    if let Some(check) = obj.obj(&["check"]).map_err(decode_failed)? {
        // An empty `Check: {}` (some clients send it) means no check.
        if !check.map().is_empty() {
            check_objects.push(check);
        }
    }
    check_objects.extend(obj.obj_list(&["checks"]).map_err(decode_failed)?);
    if check_objects.len() > SERVICE_CHECKS_MAX {
        return Err(DefinitionError::bad(format!(
            "a service may carry at most {SERVICE_CHECKS_MAX} checks"
        )));
    }
    let numbered = check_objects.len() > 1;
    let mut checks = Vec::with_capacity(check_objects.len());
    for (i, check_obj) in check_objects.iter().enumerate() {
        let mut check = parse_check(check_obj, Some(id))?;
        if check.id.is_empty() {
            check.id = if numbered {
                format!("service:{id}:{}", i + 1)
            } else {
                format!("service:{id}")
            };
        }
        if check.name.is_empty() {
            check.name = format!("Service '{name}' check");
        }
        checks.push(check);
    }
    Ok(checks)
}

/// Decodes a standalone check (`/v1/agent/check/register`, config `checks`).
pub fn parse_check_registration(obj: &Obj) -> Result<CheckSpec, DefinitionError> {
    let mut check = parse_check(obj, None)?;
    if check.name.is_empty() {
        return Err(DefinitionError::bad("Missing check name"));
    }
    if check.id.is_empty() {
        check.id = check.name.clone();
    }
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(value: serde_json::Value) -> Result<ServiceDefinition, DefinitionError> {
        parse_service_definition(&Obj::new(&value).unwrap())
    }

    #[test]
    fn service_defaults_follow_consul() {
        let def = service(json!({
            "name": "web", "port": 80, "address": "10.0.0.5",
            "checks": [{"http": "http://localhost/health", "interval": "10s"}, {"ttl": "30s"}]
        }))
        .unwrap();
        assert_eq!(def.service.id, "web");
        assert_eq!(def.checks[0].id, "service:web:1");
        assert_eq!(def.checks[1].id, "service:web:2");
        assert_eq!(def.checks[0].name, "Service 'web' check");
        assert_eq!(def.checks[0].kind, CheckKind::Http);
        assert_eq!(def.checks[1].kind, CheckKind::Ttl);
        assert_eq!(def.checks[0].initial_status, Status::Critical);
        assert_eq!(def.checks[0].service_id, "web");
        assert!(def.service.tagged_addresses.contains(&(
            "lan_ipv4".to_string(),
            "10.0.0.5".to_string(),
            80
        )));
        let single =
            service(json!({"Name": "api", "Check": {"TTL": "5s", "Status": "passing"}})).unwrap();
        assert_eq!(single.checks[0].id, "service:api");
        assert_eq!(single.checks[0].initial_status, Status::Passing);
    }

    #[test]
    fn invalid_definitions_get_consuls_messages() {
        let err = |v: serde_json::Value| service(v).unwrap_err().message;
        assert_eq!(err(json!({"port": 1})), "Missing service name");
        assert!(err(json!({"name": "w", "check": {"http": "http://x"}}))
            .contains("Interval must be > 0"));
        assert!(err(json!({"name": "w", "check": {"interval": "10s"}})).contains("TTL must be > 0"));
        assert!(
            err(json!({"name": "w", "check": {"ttl": "1s", "status": "great"}}))
                .contains("Status for checks")
        );
        assert!(err(json!({"name": "w", "address": "0.0.0.0"})).contains("Invalid service address"));
        assert!(
            err(json!({"name": "w", "weights": {"passing": 0, "warning": 1}})).contains("Weights")
        );
        assert!(err(json!({"name": "w", "check": {"ttl": "1s", "failures_before_warning": 3, "failures_before_critical": 1}})).contains("FailuresBeforeWarning"));
        let check =
            parse_check_registration(&Obj::new(&json!({"ttl": "1s"})).unwrap()).unwrap_err();
        assert_eq!(check.message, "Missing check name");
    }

    #[test]
    fn sidecar_services_expand_with_consuls_defaults() {
        let parent = service(json!({
            "name": "web", "id": "web-1", "port": 8080, "tags": ["v1"],
            "connect": {"sidecar_service": {"proxy": {"upstreams": [
                {"destination_name": "db", "local_bind_port": 9191}
            ]}}}
        }))
        .unwrap();
        let raw = parent.sidecar.clone().expect("a sidecar");
        let sidecar = expand_sidecar(&parent.service, &raw, 21000).unwrap();
        assert_eq!(sidecar.service.id, "web-1-sidecar-proxy");
        assert_eq!(sidecar.service.name, "web-sidecar-proxy");
        assert_eq!(sidecar.service.kind, "connect-proxy");
        assert_eq!(sidecar.service.port, 21000);
        assert_eq!(sidecar.service.tags, vec!["v1".to_string()]);
        let proxy: serde_json::Value =
            serde_json::from_str(sidecar.service.proxy_json.as_deref().unwrap()).unwrap();
        assert_eq!(proxy["DestinationServiceName"], "web");
        assert_eq!(proxy["DestinationServiceID"], "web-1");
        assert_eq!(proxy["LocalServiceAddress"], "127.0.0.1");
        assert_eq!(proxy["LocalServicePort"], 8080);
        assert_eq!(proxy["Upstreams"][0]["DestinationType"], "service");
        assert_eq!(proxy["Upstreams"][0]["DestinationName"], "db");
        assert_eq!(proxy["Upstreams"][0]["LocalBindPort"], 9191);
        assert_eq!(sidecar.checks.len(), 2);
        assert_eq!(sidecar.checks[0].name, "Connect Sidecar Listening");
        assert_eq!(sidecar.checks[0].definition.tcp, "127.0.0.1:21000");
        assert_eq!(sidecar.checks[1].kind, CheckKind::Alias);
        assert_eq!(sidecar.checks[1].definition.alias_service, "web-1");
        assert_eq!(sidecar.checks[0].id, "service:web-1-sidecar-proxy:1");
        // A port given in the sidecar wins over the allocated one.
        let fixed = expand_sidecar(&parent.service, &json!({"port": 3000}), 21000).unwrap();
        assert_eq!(fixed.service.port, 3000);
        let err = |v: serde_json::Value| service(v).unwrap_err().message;
        assert!(err(json!({"name": "p", "kind": "connect-proxy", "port": 1, "proxy": {"local_service_port": 1}}))
            .contains("DestinationServiceName"));
        assert!(
            err(json!({"name": "p", "connect": {"native": true, "sidecar_service": {}}}))
                .contains("Native")
        );
    }

    #[test]
    fn thresholds_and_intervals() {
        let def = service(json!({"name": "w", "check": {
            "tcp": "localhost:1", "interval": "100ms", "timeout": "2s",
            "success_before_passing": 2, "failures_before_critical": 3}}))
        .unwrap();
        let check = &def.checks[0];
        assert_eq!(check.interval(), CHECK_INTERVAL_MIN, "raised to the floor");
        assert_eq!(check.timeout(), Duration::from_secs(2));
        assert_eq!(
            (
                check.success_before_passing,
                check.failures_before_warning,
                check.failures_before_critical
            ),
            (2, 3, 3)
        );
        assert_eq!(check.output_max_bytes(), CHECK_OUTPUT_BYTES_MAX);
    }

    #[test]
    fn expose_paths_are_validated_with_consuls_words() {
        let check = |expose: serde_json::Value| {
            let proxy = normalize_proxy(&serde_json::json!({
                "DestinationServiceName": "web", "Expose": expose
            }))
            .unwrap();
            validate_expose(&proxy)
        };
        let path = |p: &str, port: i64, protocol: &str| {
            serde_json::json!({"Path": p, "LocalPathPort": 8080, "ListenerPort": port,
                               "Protocol": protocol})
        };
        assert_eq!(check(serde_json::json!({"Checks": true})), Ok(()));
        assert_eq!(
            check(
                serde_json::json!({"Paths": [path("/a", 21500, "HTTP2"), path("/a", 21501, "")]})
            ),
            Ok(()),
            "one path on two ports is Consul's too"
        );
        assert_eq!(
            check(serde_json::json!({"Paths": [path("", 21500, "")]})).unwrap_err(),
            "expose.paths: empty path exposed"
        );
        assert_eq!(
            check(serde_json::json!({"Paths": [path("/a", 21500, ""), path("/b", 21500, "")]}))
                .unwrap_err(),
            "expose.paths: duplicate listener ports exposed"
        );
        assert_eq!(
            check(serde_json::json!({"Paths": [path("/a", -1, "")]})).unwrap_err(),
            "expose.paths: invalid listener port: -1"
        );
        assert_eq!(
            check(serde_json::json!({"Paths": [path("/a", 21500, "tcp")]})).unwrap_err(),
            "protocol 'tcp' not supported for path: /a, must be in: [http http2]"
        );
    }
}
