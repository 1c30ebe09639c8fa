//! The catalog's and health's structs: `RegisterRequest` (decoded into the store's
//! [`Registration`] with the same defaults and checks as the HTTP body), `DeregisterRequest`,
//! the read requests (`DCSpecificRequest`, `ServiceSpecificRequest`, `NodeSpecificRequest`,
//! `ChecksInStateRequest`; a `ServiceSpecificRequest`'s `Source` is Consul's `QuerySource`),
//! and the rows of replies: `Node`, `ServiceNode`, `NodeService`, `HealthCheck`,
//! `CheckServiceNode`, `GatewayService`.

use super::{
    each_field, owned_pairs, string_list, string_map, write_request_field, write_string_list,
    Fields, QueryOptions,
};
use crate::consul::registration::{
    check_type_of, is_any_address, validate_meta, validate_service_meta, NAME_BYTES_MAX,
    PEER_REGISTRATION_REFUSED, REGISTRATION_CHECKS_MAX, SERVICE_TAGS_MAX,
};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::catalog::read::CheckServiceNode;
use crate::store::catalog::{
    CheckDefinition, CheckRegistration, HealthCheck, Node, Registration, ServiceInstance,
    ServiceRegistration, StrMap, Weights,
};

/// Why a registration is refused: a body that is not the struct (`Decode`), or one that
/// is but breaks Consul's rules (`Invalid`, answered with Consul's words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterError {
    Decode(WireError),
    Invalid(String),
}

impl From<WireError> for RegisterError {
    fn from(error: WireError) -> Self {
        RegisterError::Decode(error)
    }
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisterError::Decode(error) => write!(f, "{}", super::decode_error(error.clone())),
            RegisterError::Invalid(why) => write!(f, "{why}"),
        }
    }
}

fn too_long(what: &str, value: &str) -> Result<(), RegisterError> {
    if value.len() > NAME_BYTES_MAX {
        return Err(RegisterError::Invalid(format!(
            "{what} exceeds {NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// A `RegisterRequest` and its `Token`, decoded into the store's registration.
#[derive(Clone, Debug, PartialEq)]
pub struct RegisterRequest {
    pub registration: Registration,
    /// The datacenter the request names (empty: the server's), before defaulting.
    pub datacenter: String,
    pub token: String,
}

/// `Weights`; nil when absent.
fn read_weights(r: &mut Reader) -> Result<Option<Weights>, WireError> {
    if r.try_nil()? {
        return Ok(None);
    }
    let mut weights = Weights {
        passing: 0,
        warning: 0,
    };
    each_field(r, |name, r| {
        match name {
            "Passing" => weights.passing = r.u32("Passing")?,
            "Warning" => weights.warning = r.u32("Warning")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(Some(weights))
}

/// A `NodeService` (`RegisterRequest.Service`).
pub(super) fn read_service(
    r: &mut Reader,
    peer: &mut bool,
) -> Result<ServiceRegistration, WireError> {
    let mut service = ServiceRegistration::default();
    each_field(r, |name, r| service_field(&mut service, name, r, peer))?;
    Ok(service)
}

/// One field of a `NodeService` into `service`; `false` for a field it does not have (or
/// one a registration does not carry, such as the Raft indexes).
pub(super) fn service_field(
    service: &mut ServiceRegistration,
    name: &str,
    r: &mut Reader,
    peer: &mut bool,
) -> Result<bool, WireError> {
    match name {
        "Kind" => service.kind = r.str()?.to_string(),
        "ID" => service.id = r.str()?.to_string(),
        "Service" => service.name = r.str()?.to_string(),
        "Tags" => {
            service.tags = string_list(r)?.into_iter().map(str::to_string).collect();
        }
        "Address" => service.address = r.str()?.to_string(),
        "TaggedAddresses" => {
            let entries = r.map_len()?;
            for _ in 0..entries {
                let tag = r.str()?.to_string();
                let (mut address, mut port) = (String::new(), 0);
                each_field(r, |name, r| {
                    match name {
                        "Address" => address = r.str()?.to_string(),
                        "Port" => port = r.i64("Port")?,
                        _ => return Ok(false),
                    }
                    Ok(true)
                })?;
                let port = i32::try_from(port).map_err(|_| WireError::IntegerOverflow {
                    field: "TaggedAddresses.Port",
                })?;
                service.tagged_addresses.push((tag, address, port));
            }
        }
        "Meta" => service.meta = owned_pairs(&string_map(r)?),
        "Port" => {
            service.port = i32::try_from(r.i64("Port")?)
                .map_err(|_| WireError::IntegerOverflow { field: "Port" })?
        }
        "SocketPath" => service.socket_path = r.str()?.to_string(),
        "Weights" => service.weights = read_weights(r)?,
        "EnableTagOverride" => service.enable_tag_override = r.bool()?,
        "Proxy" => {
            let proxy = super::read_json(r)?;
            if proxy.as_object().is_some_and(|m| !m.is_empty()) {
                service.proxy_json = Some(proxy.to_string());
            }
        }
        "Connect" => {
            each_field(r, |name, r| {
                if name == "Native" {
                    service.connect_native = r.bool()?;
                    return Ok(true);
                }
                Ok(false)
            })?;
        }
        "PeerName" => *peer |= !r.str()?.is_empty(),
        _ => return Ok(false),
    }
    Ok(true)
}

/// A `HealthCheckDefinition`; durations in nanoseconds.
fn read_definition(r: &mut Reader) -> Result<CheckDefinition, WireError> {
    let mut d = CheckDefinition::default();
    each_field(r, |name, r| {
        match name {
            "HTTP" => d.http = r.str()?.to_string(),
            "TLSServerName" => d.tls_server_name = r.str()?.to_string(),
            "TLSSkipVerify" => d.tls_skip_verify = r.bool()?,
            "Header" => {
                let entries = r.map_len()?;
                for _ in 0..entries {
                    let name = r.str()?.to_string();
                    let values = string_list(r)?.into_iter().map(str::to_string).collect();
                    d.header.push((name, values));
                }
            }
            "Method" => d.method = r.str()?.to_string(),
            "Body" => d.body = r.str()?.to_string(),
            "DisableRedirects" => d.disable_redirects = r.bool()?,
            "TCP" => d.tcp = r.str()?.to_string(),
            "UDP" => d.udp = r.str()?.to_string(),
            "H2PING" => d.h2ping = r.str()?.to_string(),
            "H2PingUseTLS" => d.h2ping_use_tls = r.bool()?,
            "OSService" => d.os_service = r.str()?.to_string(),
            "Interval" => d.interval_ns = r.i64("Interval")?,
            "OutputMaxSize" => d.output_max_size = r.u64("OutputMaxSize")?,
            "Timeout" => d.timeout_ns = r.i64("Timeout")?,
            "DeregisterCriticalServiceAfter" => {
                d.deregister_critical_service_after_ns = r.i64("DeregisterCriticalServiceAfter")?
            }
            "ScriptArgs" => {
                d.script_args = string_list(r)?.into_iter().map(str::to_string).collect()
            }
            "GRPC" => d.grpc = r.str()?.to_string(),
            "GRPCUseTLS" => d.grpc_use_tls = r.bool()?,
            "AliasNode" => d.alias_node = r.str()?.to_string(),
            "AliasService" => d.alias_service = r.str()?.to_string(),
            "TTL" => d.ttl_ns = r.i64("TTL")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(d)
}

/// One field of a `HealthCheck` into `check`; `false` for a field it does not have (or one
/// a registration does not carry: the service's name and tags, the Raft indexes).
pub(super) fn check_field(
    check: &mut CheckRegistration,
    name: &str,
    r: &mut Reader,
    peer: &mut bool,
) -> Result<bool, WireError> {
    match name {
        "Node" => check.node = r.str()?.to_string(),
        "CheckID" => check.check_id = r.str()?.to_string(),
        "Name" => check.name = r.str()?.to_string(),
        "Status" => check.status = r.str()?.to_string(),
        "Notes" => check.notes = r.str()?.to_string(),
        "Output" => check.output = r.str()?.to_string(),
        "ServiceID" => check.service_id = r.str()?.to_string(),
        "Type" => check.kind = r.str()?.to_string(),
        "Interval" => check.interval = r.str()?.to_string(),
        "Timeout" => check.timeout = r.str()?.to_string(),
        "ExposedPort" => {
            check.exposed_port =
                i32::try_from(r.i64("ExposedPort")?).map_err(|_| WireError::IntegerOverflow {
                    field: "ExposedPort",
                })?
        }
        "Definition" => check.definition = Some(read_definition(r)?),
        "PeerName" => *peer |= !r.str()?.is_empty(),
        _ => return Ok(false),
    }
    Ok(true)
}

/// A `HealthCheck` of a registration, defaulted as the HTTP body's are: the ID from the
/// name, the node from the request, the type from the definition.
pub(super) fn read_check(
    r: &mut Reader,
    node: &str,
    peer: &mut bool,
) -> Result<CheckRegistration, RegisterError> {
    let mut check = CheckRegistration::default();
    each_field(r, |name, r| check_field(&mut check, name, r, peer))?;
    let definition = check.definition.take().unwrap_or_default();
    if check.check_id.is_empty() {
        check.check_id = check.name.clone();
    }
    too_long("check ID", &check.check_id)?;
    if check.node.is_empty() {
        check.node = node.to_string();
    }
    if check.kind.is_empty() {
        check.kind = check_type_of(&definition).to_string();
    }
    check.definition = (!definition.is_empty()).then_some(definition);
    Ok(check)
}

/// Decodes `Catalog.Register`'s `RegisterRequest` into the store's registration, with the
/// HTTP body's defaults and checks (`consul::registration`), and Consul's refusal of a
/// request naming a peer.
pub fn decode_register(
    body: &[u8],
    default_datacenter: &str,
) -> Result<RegisterRequest, RegisterError> {
    let mut reg = Registration::default();
    let mut token = "";
    let mut peer = false;
    let mut service = None;
    // Checks are read once the node is known (a check's node defaults to it), so their
    // bodies are kept as slices until then.
    let mut check_bodies: Vec<&[u8]> = Vec::new();
    let mut r = Reader::new(body);
    let entries = r.map_len()?;
    for _ in 0..entries {
        let name = r.str()?;
        match name {
            "Datacenter" => reg.datacenter = r.str()?.to_string(),
            "ID" => reg.id = r.str()?.to_ascii_lowercase(),
            "Node" => reg.node = r.str()?.to_string(),
            "Address" => reg.address = r.str()?.to_string(),
            "TaggedAddresses" => reg.tagged_addresses = owned_pairs(&string_map(&mut r)?),
            "NodeMeta" => reg.node_meta = owned_pairs(&string_map(&mut r)?),
            "Service" => {
                if !r.try_nil()? {
                    service = Some(read_service(&mut r, &mut peer)?);
                }
            }
            "Check" => {
                let start = r.position();
                r.skip()?;
                let value = &body[start..r.position()];
                if value != [0xc0] {
                    check_bodies.push(value);
                }
            }
            "Checks" => {
                let count = r.array_len()?;
                for _ in 0..count {
                    let start = r.position();
                    r.skip()?;
                    check_bodies.push(&body[start..r.position()]);
                }
            }
            "SkipNodeUpdate" => reg.skip_node_update = r.bool()?,
            "PeerName" => peer |= !r.str()?.is_empty(),
            "Token" => token = r.str()?,
            _ => r.skip()?,
        }
    }
    if peer {
        return Err(RegisterError::Invalid(
            PEER_REGISTRATION_REFUSED.to_string(),
        ));
    }
    if check_bodies.len() > REGISTRATION_CHECKS_MAX {
        return Err(RegisterError::Invalid(format!(
            "a registration may carry at most {REGISTRATION_CHECKS_MAX} checks"
        )));
    }
    too_long("node name", &reg.node)?;
    validate_meta(&reg.node_meta, true).map_err(RegisterError::Invalid)?;
    for check in check_bodies {
        let mut peer = false;
        let check = read_check(&mut Reader::new(check), &reg.node, &mut peer)?;
        if peer {
            return Err(RegisterError::Invalid(
                PEER_REGISTRATION_REFUSED.to_string(),
            ));
        }
        reg.checks.push(check);
    }
    if let Some(service) = &service {
        // The same rule as the HTTP path: a mesh gateway may carry Consul's one reserved
        // service meta key, `consul-wan-federation`.
        validate_service_meta(&service.kind, &service.meta)
            .map_err(|e| RegisterError::Invalid(format!("Invalid Service Meta: {e}")))?;
        if service.tags.len() > SERVICE_TAGS_MAX {
            return Err(RegisterError::Invalid(format!(
                "a service may carry at most {SERVICE_TAGS_MAX} tags"
            )));
        }
        too_long("service name", &service.name)?;
        too_long("service ID", &service.id)?;
        if is_any_address(&service.address) {
            return Err(RegisterError::Invalid(
                "Invalid service address".to_string(),
            ));
        }
    }
    reg.service = service;
    let datacenter = reg.datacenter.clone();
    if reg.datacenter.is_empty() {
        reg.datacenter = default_datacenter.to_string();
    }
    Ok(RegisterRequest {
        registration: reg,
        datacenter,
        token: token.to_string(),
    })
}

/// A `NodeService` as a client registers it; with `modify_index`, the `ModifyIndex` a
/// transaction's CAS compares.
pub(super) fn write_registered_service(
    w: &mut Writer,
    service: &ServiceRegistration,
    modify_index: Option<u64>,
) {
    let mut f = Fields::new(w, 13 + usize::from(modify_index.is_some()));
    f.field("Address").str(&service.address);
    {
        let mut connect = Fields::new(f.field("Connect"), 1);
        connect.field("Native").bool(service.connect_native);
        connect.finish();
    }
    f.field("EnableTagOverride")
        .bool(service.enable_tag_override);
    f.field("ID").str(&service.id);
    f.field("Kind").str(&service.kind);
    super::write_string_map(
        f.field("Meta"),
        service.meta.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        true,
    );
    if let Some(index) = modify_index {
        f.field("ModifyIndex").uint(index);
    }
    f.field("Port").int(service.port as i64);
    {
        let w = f.field("Proxy");
        match service
            .proxy_json
            .as_deref()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        {
            Some(value) => super::write_json(w, &value),
            None => w.map_len(0),
        }
    }
    f.field("Service").str(&service.name);
    f.field("SocketPath").str(&service.socket_path);
    {
        let w = f.field("TaggedAddresses");
        if service.tagged_addresses.is_empty() {
            w.nil();
        } else {
            w.map_len(service.tagged_addresses.len());
            for (tag, address, port) in &service.tagged_addresses {
                w.str(tag);
                let mut a = Fields::new(w, 2);
                a.field("Address").str(address);
                a.field("Port").int(*port as i64);
                a.finish();
            }
        }
    }
    write_string_list(
        f.field("Tags"),
        service.tags.iter().map(String::as_str),
        true,
    );
    match service.weights {
        Some(weights) => write_weights(f.field("Weights"), weights),
        None => f.field("Weights").nil(),
    }
    f.finish();
}

/// A `HealthCheck` as a client registers it; with `modify_index`, the `ModifyIndex` a
/// transaction's CAS compares.
pub(super) fn write_registered_check(
    w: &mut Writer,
    check: &CheckRegistration,
    modify_index: Option<u64>,
) {
    let mut f = Fields::new(w, 12 + usize::from(modify_index.is_some()));
    f.field("CheckID").str(&check.check_id);
    write_definition(f.field("Definition"), check.definition.as_ref());
    f.field("ExposedPort").int(check.exposed_port as i64);
    f.field("Interval").str(&check.interval);
    if let Some(index) = modify_index {
        f.field("ModifyIndex").uint(index);
    }
    f.field("Name").str(&check.name);
    f.field("Node").str(&check.node);
    f.field("Notes").str(&check.notes);
    f.field("Output").str(&check.output);
    f.field("ServiceID").str(&check.service_id);
    f.field("Status").str(&check.status);
    f.field("Timeout").str(&check.timeout);
    f.field("Type").str(&check.kind);
    f.finish();
}

/// `Catalog.Register`'s `RegisterRequest` of a registration, sent with `token`: what a
/// client agent's anti-entropy sends (the inverse of [`decode_register`]).
pub fn encode_register(registration: &Registration, token: &str) -> Vec<u8> {
    let mut w = Writer::new();
    let mut f = Fields::new(&mut w, 10);
    f.field("Address").str(&registration.address);
    {
        let w = f.field("Checks");
        w.array_len(registration.checks.len());
        for check in &registration.checks {
            write_registered_check(w, check, None);
        }
    }
    f.field("Datacenter").str(&registration.datacenter);
    f.field("ID").str(&registration.id);
    f.field("Node").str(&registration.node);
    super::write_string_map(
        f.field("NodeMeta"),
        registration
            .node_meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
        true,
    );
    match &registration.service {
        Some(service) => write_registered_service(f.field("Service"), service, None),
        None => f.field("Service").nil(),
    }
    f.field("SkipNodeUpdate")
        .bool(registration.skip_node_update);
    super::write_string_map(
        f.field("TaggedAddresses"),
        registration
            .tagged_addresses
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
        true,
    );
    f.field("Token").str(token);
    f.finish();
    w.into_inner()
}

/// `DeregisterRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeregisterRequest<'a> {
    pub datacenter: &'a str,
    pub node: &'a str,
    pub service_id: &'a str,
    pub check_id: &'a str,
    pub token: &'a str,
}

impl<'a> DeregisterRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<DeregisterRequest<'a>, WireError> {
        let mut request = DeregisterRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Node" => request.node = r.str()?,
                "ServiceID" => request.service_id = r.str()?,
                "CheckID" => request.check_id = r.str()?,
                _ => return write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }
}

impl DeregisterRequest<'_> {
    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 5);
        f.field("CheckID").str(self.check_id);
        f.field("Datacenter").str(self.datacenter);
        f.field("Node").str(self.node);
        f.field("ServiceID").str(self.service_id);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `DCSpecificRequest`: lists of a datacenter (nodes, services, node dump).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DcSpecificRequest<'a> {
    pub datacenter: &'a str,
    pub node_meta_filters: Vec<(&'a str, &'a str)>,
    pub options: QueryOptions<'a>,
}

impl<'a> DcSpecificRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<DcSpecificRequest<'a>, WireError> {
        let mut request = DcSpecificRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "NodeMetaFilters" => request.node_meta_filters = string_map(r)?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }
}

impl DcSpecificRequest<'_> {
    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Datacenter", "NodeMetaFilters"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ => super::write_string_map(w, self.node_meta_filters.iter().copied(), true),
            },
        );
        w.into_inner()
    }

    /// The request with its `Source` (`GET /v1/catalog/nodes?near=`: `Catalog.ListNodes`
    /// sorts the nodes nearest that node first).
    pub fn encode_with_source(&self, source: &QuerySource) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Datacenter", "NodeMetaFilters", "Source"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "Source" => source.encode(w),
                _ => super::write_string_map(w, self.node_meta_filters.iter().copied(), true),
            },
        );
        w.into_inner()
    }
}

/// A `DCSpecificRequest`'s `Source`, read apart from the fields [`DcSpecificRequest`]
/// keeps (only `Catalog.ListNodes` sorts by it); empty when the request has none.
pub fn dc_request_source(body: &[u8]) -> Result<QuerySource<'_>, WireError> {
    let mut source = QuerySource::default();
    each_field(&mut Reader::new(body), |name, r| {
        if name != "Source" {
            return Ok(false);
        }
        source = QuerySource::decode(r)?;
        Ok(true)
    })?;
    Ok(source)
}

/// Consul's `QuerySource`: the node a read is made from, for `?near` (answers sorted
/// nearest first by network coordinates when it names a node of the serving datacenter).
/// Its `Segment`, `NodePartition` and `Ip` are written empty and skipped when read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuerySource<'a> {
    pub datacenter: &'a str,
    pub node: &'a str,
}

impl<'a> QuerySource<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<QuerySource<'a>, WireError> {
        let mut source = QuerySource::default();
        if r.try_nil()? {
            return Ok(source);
        }
        each_field(r, |name, r| {
            match name {
                "Datacenter" => source.datacenter = r.str()?,
                "Node" => source.node = r.str()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(source)
    }

    fn encode(&self, w: &mut Writer) {
        let mut f = Fields::new(w, 5);
        f.field("Datacenter").str(self.datacenter);
        f.field("Ip").str("");
        f.field("Node").str(self.node);
        f.field("NodePartition").str("");
        f.field("Segment").str("");
        f.finish();
    }
}

/// `ServiceSpecificRequest`: the instances of one service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceSpecificRequest<'a> {
    pub datacenter: &'a str,
    pub service_name: &'a str,
    pub node_meta_filters: Vec<(&'a str, &'a str)>,
    /// `ServiceTags`, or the deprecated single `ServiceTag`.
    pub service_tags: Vec<&'a str>,
    pub tag_filter: bool,
    pub connect: bool,
    pub ingress: bool,
    pub peer_name: &'a str,
    /// `?near`: where the read is made from.
    pub source: QuerySource<'a>,
    /// `ServiceKind`: the kind `Internal.ServiceTopology` is asked for (`?kind=`).
    pub service_kind: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> ServiceSpecificRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ServiceSpecificRequest<'a>, WireError> {
        let mut request = ServiceSpecificRequest::default();
        let mut single_tag = "";
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "ServiceName" => request.service_name = r.str()?,
                "NodeMetaFilters" => request.node_meta_filters = string_map(r)?,
                "ServiceTags" => request.service_tags = string_list(r)?,
                "ServiceTag" => single_tag = r.str()?,
                "TagFilter" => request.tag_filter = r.bool()?,
                "Connect" => request.connect = r.bool()?,
                "Ingress" => request.ingress = r.bool()?,
                "PeerName" => request.peer_name = r.str()?,
                "Source" => request.source = QuerySource::decode(r)?,
                "ServiceKind" => request.service_kind = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        // Consul's compatibility with agents that send the single tag.
        if request.service_tags.is_empty() && !single_tag.is_empty() {
            request.service_tags.push(single_tag);
        }
        Ok(request)
    }

    /// The tags an instance must carry: only when `TagFilter` asks for them, as Consul's
    /// catalog and health endpoints read the request.
    pub fn required_tags(&self) -> &[&'a str] {
        if self.tag_filter {
            &self.service_tags
        } else {
            &[]
        }
    }
}

impl ServiceSpecificRequest<'_> {
    /// The request as a client sends it: the tags in `ServiceTags` (and `TagFilter` set
    /// when there are any), as Consul's agent fills it from `?tag`.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &[
                "Connect",
                "Datacenter",
                "Ingress",
                "NodeMetaFilters",
                "PeerName",
                "ServiceKind",
                "ServiceName",
                "ServiceTags",
                "Source",
                "TagFilter",
            ],
            |name, w| match name {
                "Connect" => w.bool(self.connect),
                "Datacenter" => w.str(self.datacenter),
                "Ingress" => w.bool(self.ingress),
                "NodeMetaFilters" => {
                    super::write_string_map(w, self.node_meta_filters.iter().copied(), true)
                }
                "PeerName" => w.str(self.peer_name),
                "ServiceKind" => w.str(self.service_kind),
                "ServiceName" => w.str(self.service_name),
                "ServiceTags" => write_string_list(w, self.service_tags.iter().copied(), true),
                "Source" => self.source.encode(w),
                _ => w.bool(self.tag_filter),
            },
        );
        w.into_inner()
    }
}

/// `NodeSpecificRequest`: one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSpecificRequest<'a> {
    pub datacenter: &'a str,
    pub node: &'a str,
    pub peer_name: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> NodeSpecificRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<NodeSpecificRequest<'a>, WireError> {
        let mut request = NodeSpecificRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Node" => request.node = r.str()?,
                "PeerName" => request.peer_name = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }
}

impl NodeSpecificRequest<'_> {
    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Datacenter", "Node", "PeerName"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "Node" => w.str(self.node),
                _ => w.str(self.peer_name),
            },
        );
        w.into_inner()
    }
}

/// `ChecksInStateRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChecksInStateRequest<'a> {
    pub datacenter: &'a str,
    pub state: &'a str,
    pub node_meta_filters: Vec<(&'a str, &'a str)>,
    pub options: QueryOptions<'a>,
}

impl<'a> ChecksInStateRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ChecksInStateRequest<'a>, WireError> {
        let mut request = ChecksInStateRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "State" => request.state = r.str()?,
                "NodeMetaFilters" => request.node_meta_filters = string_map(r)?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }
}

impl ChecksInStateRequest<'_> {
    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Datacenter", "NodeMetaFilters", "State"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                "NodeMetaFilters" => {
                    super::write_string_map(w, self.node_meta_filters.iter().copied(), true)
                }
                _ => w.str(self.state),
            },
        );
        w.into_inner()
    }
}

/// Whether a node's metadata has every pair of `filters` (Consul's `SatisfiesMetaFilters`).
pub fn satisfies(meta: &StrMap, filters: &[(&str, &str)]) -> bool {
    filters
        .iter()
        .all(|(k, v)| meta.get(k).is_some_and(|have| **have == **v))
}

/// A stored `map[string]string`; nil when `nil_when_empty` and there is nothing in it.
pub fn write_str_map(w: &mut Writer, map: &StrMap, nil_when_empty: bool) {
    if map.is_empty() && nil_when_empty {
        w.nil();
        return;
    }
    w.map_len(map.len());
    for (k, v) in map.iter() {
        w.str(k);
        w.str(v);
    }
}

/// A `Node`.
pub fn write_node(w: &mut Writer, node: &Node) {
    let mut f = Fields::new(w, 11);
    f.field("Address").str(&node.address);
    f.field("CreateIndex").uint(node.create_index);
    f.field("Datacenter").str(&node.datacenter);
    f.field("ID").str(&node.id);
    f.field("Locality").nil();
    write_str_map(f.field("Meta"), &node.meta, false);
    f.field("ModifyIndex").uint(node.modify_index);
    f.field("Node").str(&node.name);
    f.field("Partition").str("");
    f.field("PeerName").str("");
    write_str_map(f.field("TaggedAddresses"), &node.tagged_addresses, true);
    f.finish();
}

/// A `ServiceAddress` map (`TaggedAddresses` of a service); nil when there is none.
fn write_service_tagged_addresses(w: &mut Writer, service: &ServiceInstance) {
    let list = service.tagged_addresses();
    if list.is_empty() {
        w.nil();
        return;
    }
    w.map_len(list.len());
    for (tag, address) in list.iter() {
        w.str(tag);
        let mut f = Fields::new(w, 2);
        f.field("Address").str(&address.address);
        f.field("Port").int(address.port as i64);
        f.finish();
    }
}

fn write_weights(w: &mut Writer, weights: Weights) {
    let mut f = Fields::new(w, 2);
    f.field("Passing").int(weights.passing as i64);
    f.field("Warning").int(weights.warning as i64);
    f.finish();
}

/// `ConnectProxyConfig`: what the registration sent (kept as JSON), or the empty struct.
fn write_proxy(w: &mut Writer, service: &ServiceInstance) {
    let stored = service
        .extras
        .as_deref()
        .and_then(|e| e.proxy_json.as_deref());
    match stored.and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok()) {
        Some(value) => super::write_json(w, &value),
        None => w.map_len(0),
    }
}

/// `ServiceConnect`.
fn write_connect(w: &mut Writer, service: &ServiceInstance) {
    let mut f = Fields::new(w, 3);
    f.field("Native")
        .bool(service.extras.as_deref().is_some_and(|e| e.connect_native));
    f.field("PeerMeta").nil();
    f.field("SidecarService").nil();
    f.finish();
}

/// A `NodeService`.
pub fn write_node_service(w: &mut Writer, service: &ServiceInstance) {
    let mut f = Fields::new(w, 18);
    f.field("Address").str(&service.address);
    write_connect(f.field("Connect"), service);
    f.field("CreateIndex").uint(service.create_index);
    f.field("EnableTagOverride")
        .bool(service.enable_tag_override);
    f.field("ID").str(&service.id);
    f.field("Kind").str(service.kind());
    f.field("Locality").nil();
    f.field("LocallyRegisteredAsSidecar").bool(false);
    write_str_map(f.field("Meta"), &service.meta, false);
    f.field("ModifyIndex").uint(service.modify_index);
    f.field("PeerName").str("");
    f.field("Port").int(service.port as i64);
    write_proxy(f.field("Proxy"), service);
    f.field("Service").str(&service.name);
    f.field("SocketPath").str(service.socket_path());
    write_service_tagged_addresses(f.field("TaggedAddresses"), service);
    write_string_list(f.field("Tags"), service.tags.iter().map(|t| &**t), false);
    write_weights(f.field("Weights"), service.weights);
    f.finish();
}

/// A `ServiceNode`: the node's columns joined with the instance.
pub fn write_service_node(w: &mut Writer, node: &Node, service: &ServiceInstance) {
    let mut f = Fields::new(w, 23);
    f.field("Address").str(&node.address);
    f.field("CreateIndex").uint(service.create_index);
    f.field("Datacenter").str(&node.datacenter);
    f.field("ID").str(&node.id);
    f.field("ModifyIndex").uint(service.modify_index);
    f.field("Node").str(&node.name);
    write_str_map(f.field("NodeMeta"), &node.meta, false);
    f.field("PeerName").str("");
    f.field("ServiceAddress").str(&service.address);
    write_connect(f.field("ServiceConnect"), service);
    f.field("ServiceEnableTagOverride")
        .bool(service.enable_tag_override);
    f.field("ServiceID").str(&service.id);
    f.field("ServiceKind").str(service.kind());
    f.field("ServiceLocality").nil();
    write_str_map(f.field("ServiceMeta"), &service.meta, false);
    f.field("ServiceName").str(&service.name);
    f.field("ServicePort").int(service.port as i64);
    write_proxy(f.field("ServiceProxy"), service);
    f.field("ServiceSocketPath").str(service.socket_path());
    write_service_tagged_addresses(f.field("ServiceTaggedAddresses"), service);
    write_string_list(
        f.field("ServiceTags"),
        service.tags.iter().map(|t| &**t),
        false,
    );
    write_weights(f.field("ServiceWeights"), service.weights);
    write_str_map(f.field("TaggedAddresses"), &node.tagged_addresses, true);
    f.finish();
}

/// A `HealthCheckDefinition` (all fields; durations as nanoseconds).
fn write_definition(w: &mut Writer, d: Option<&CheckDefinition>) {
    let empty = CheckDefinition::default();
    let d = d.unwrap_or(&empty);
    let mut f = Fields::new(w, 24);
    f.field("AliasNode").str(&d.alias_node);
    f.field("AliasService").str(&d.alias_service);
    f.field("Body").str(&d.body);
    f.field("DeregisterCriticalServiceAfter")
        .int(d.deregister_critical_service_after_ns);
    f.field("DisableRedirects").bool(d.disable_redirects);
    f.field("DockerContainerID").str("");
    f.field("GRPC").str(&d.grpc);
    f.field("GRPCUseTLS").bool(d.grpc_use_tls);
    f.field("H2PING").str(&d.h2ping);
    f.field("H2PingUseTLS").bool(d.h2ping_use_tls);
    f.field("HTTP").str(&d.http);
    {
        let w = f.field("Header");
        if d.header.is_empty() {
            w.nil();
        } else {
            w.map_len(d.header.len());
            for (name, values) in &d.header {
                w.str(name);
                write_string_list(w, values.iter().map(String::as_str), false);
            }
        }
    }
    f.field("Interval").int(d.interval_ns);
    f.field("Method").str(&d.method);
    f.field("OSService").str(&d.os_service);
    f.field("OutputMaxSize").uint(d.output_max_size);
    write_string_list(
        f.field("ScriptArgs"),
        d.script_args.iter().map(String::as_str),
        true,
    );
    f.field("Shell").str("");
    f.field("TCP").str(&d.tcp);
    f.field("TLSServerName").str(&d.tls_server_name);
    f.field("TLSSkipVerify").bool(d.tls_skip_verify);
    f.field("TTL").int(d.ttl_ns);
    f.field("Timeout").int(d.timeout_ns);
    f.field("UDP").str(&d.udp);
    f.finish();
}

/// A `HealthCheck`.
pub fn write_health_check(w: &mut Writer, check: &HealthCheck) {
    let mut f = Fields::new(w, 17);
    f.field("CheckID").str(&check.check_id);
    f.field("CreateIndex").uint(check.create_index);
    write_definition(f.field("Definition"), check.definition());
    f.field("ExposedPort").int(check.exposed_port() as i64);
    f.field("Interval").str(check.interval());
    f.field("ModifyIndex").uint(check.modify_index);
    f.field("Name").str(&check.name);
    f.field("Node").str(&check.node);
    f.field("Notes").str(check.notes());
    f.field("Output").str(&check.output);
    f.field("PeerName").str("");
    f.field("ServiceID").str(&check.service_id);
    f.field("ServiceName").str(&check.service_name);
    write_string_list(
        f.field("ServiceTags"),
        check.service_tags.iter().map(|t| &**t),
        false,
    );
    f.field("Status").str(check.status.as_str());
    f.field("Timeout").str(check.timeout());
    f.field("Type").str(check.kind());
    f.finish();
}

/// `HealthChecks`: a list of checks (nil when empty, as Consul's nil slice).
pub fn write_health_checks<'c>(
    w: &mut Writer,
    checks: impl ExactSizeIterator<Item = &'c HealthCheck>,
) {
    if checks.len() == 0 {
        w.nil();
        return;
    }
    w.array_len(checks.len());
    for check in checks {
        write_health_check(w, check);
    }
}

/// A `CheckServiceNode`.
pub fn write_check_service_node(w: &mut Writer, row: &CheckServiceNode) {
    let mut f = Fields::new(w, 3);
    {
        let w = f.field("Checks");
        let count = row.node_checks.len() + row.service_checks.len();
        w.array_len(count);
        for check in row.checks() {
            write_health_check(w, check);
        }
    }
    write_node(f.field("Node"), row.node);
    write_node_service(f.field("Service"), row.service);
    f.finish();
}

/// One `GatewayService` (`Catalog.GatewayServices`' rows): the gateway and the service as
/// `ServiceName`s, the listener's settings and the row's `RaftIndex`.
pub fn write_gateway_service(w: &mut Writer, row: &crate::store::gateways::GatewayService) {
    let service_name = |w: &mut Writer, name: &str| {
        let mut f = Fields::new(w, 1);
        f.field("Name").str(name);
        f.finish();
    };
    let mut f = Fields::new(w, 14);
    f.field("CAFile").str(&row.ca_file);
    f.field("CertFile").str(&row.cert_file);
    f.field("CreateIndex").uint(row.create_index);
    f.field("FromWildcard").bool(row.from_wildcard);
    service_name(f.field("Gateway"), &row.gateway);
    f.field("GatewayKind").str(row.gateway_kind.as_str());
    write_string_list(f.field("Hosts"), row.hosts.iter().map(|h| &**h), true);
    f.field("KeyFile").str(&row.key_file);
    f.field("ModifyIndex").uint(row.modify_index);
    f.field("Port").int(i64::from(row.port));
    f.field("Protocol").str(&row.protocol);
    f.field("SNI").str(&row.sni);
    service_name(f.field("Service"), &row.service);
    f.field("ServiceKind").str(&row.service_kind);
    f.finish();
}

/// A `GatewayService` read back into the store's row (the inverse of
/// [`write_gateway_service`]); a kind other than the two gateways' is refused.
pub fn read_gateway_service(
    r: &mut Reader,
) -> Result<crate::store::gateways::GatewayService, WireError> {
    use crate::store::catalog::rows::arc_str;
    use crate::store::gateways::{GatewayKind, GatewayService};
    fn service_name(r: &mut Reader) -> Result<arcstr::ArcStr, WireError> {
        let mut name = "";
        if r.try_nil()? {
            return Ok(arcstr::ArcStr::default());
        }
        each_field(r, |field, r| {
            if field != "Name" {
                return Ok(false);
            }
            name = r.str()?;
            Ok(true)
        })?;
        Ok(arcstr::ArcStr::from(name))
    }
    let mut row = GatewayService {
        gateway: Default::default(),
        service: Default::default(),
        gateway_kind: GatewayKind::Terminating,
        port: 0,
        protocol: Default::default(),
        hosts: Vec::new(),
        ca_file: Default::default(),
        cert_file: Default::default(),
        key_file: Default::default(),
        sni: Default::default(),
        from_wildcard: false,
        service_kind: Default::default(),
        create_index: 0,
        modify_index: 0,
    };
    each_field(r, |name, r| {
        match name {
            "CAFile" => row.ca_file = arc_str(r.str()?),
            "CertFile" => row.cert_file = arc_str(r.str()?),
            "CreateIndex" => row.create_index = r.u64("CreateIndex")?,
            "FromWildcard" => row.from_wildcard = r.bool()?,
            "Gateway" => row.gateway = service_name(r)?,
            "GatewayKind" => {
                row.gateway_kind = match r.str()? {
                    "ingress-gateway" => GatewayKind::Ingress,
                    "terminating-gateway" => GatewayKind::Terminating,
                    _ => return Err(WireError::Invalid("unknown GatewayKind")),
                }
            }
            "Hosts" => {
                row.hosts = if r.try_nil()? {
                    Vec::new()
                } else {
                    string_list(r)?.into_iter().map(arc_str).collect()
                }
            }
            "KeyFile" => row.key_file = arc_str(r.str()?),
            "ModifyIndex" => row.modify_index = r.u64("ModifyIndex")?,
            "Port" => {
                row.port = u16::try_from(r.i64("Port")?)
                    .map_err(|_| WireError::IntegerOverflow { field: "Port" })?
            }
            "Protocol" => row.protocol = arc_str(r.str()?),
            "SNI" => row.sni = arc_str(r.str()?),
            "Service" => row.service = service_name(r)?,
            "ServiceKind" => row.service_kind = arc_str(r.str()?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(row)
}

/// `IndexedGatewayServices` (`Catalog.GatewayServices`): the rows, nil for none.
pub fn read_indexed_gateway_services(
    body: &[u8],
) -> Result<
    (
        super::QueryMeta,
        Vec<crate::store::gateways::GatewayService>,
    ),
    WireError,
> {
    let mut rows = Vec::new();
    let meta = super::read_reply(body, |name, r| {
        if name != "Services" {
            return Ok(false);
        }
        if r.try_nil()? {
            return Ok(true);
        }
        let count = r.array_len()?;
        rows.reserve(count.min(r.rest().len()));
        for _ in 0..count {
            rows.push(read_gateway_service(r)?);
        }
        Ok(true)
    })?;
    Ok((meta, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dc_specific_request_decodes_as_encoded() {
        let request = DcSpecificRequest {
            datacenter: "dc1",
            node_meta_filters: vec![("rack", "r1")],
            options: QueryOptions {
                token: "secret",
                min_query_index: 7,
                allow_stale: true,
                ..QueryOptions::default()
            },
        };
        assert_eq!(DcSpecificRequest::decode(&request.encode()), Ok(request));
        let bare = DcSpecificRequest::default();
        assert_eq!(DcSpecificRequest::decode(&bare.encode()), Ok(bare));
    }

    fn register_body(service_fields: impl FnOnce(&mut Writer), checks: usize) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 5);
        {
            let w = f.field("Checks");
            w.array_len(checks);
            for n in 0..checks {
                let mut c = Fields::new(w, 3);
                c.field("Name").str(&format!("check {n}"));
                c.field("ServiceID").str("web1");
                c.field("Status").str("passing");
                c.finish();
            }
        }
        f.field("Node").str("n1");
        f.field("NodeMeta").map_len(0);
        service_fields(f.field("Service"));
        f.field("Token").str("secret");
        f.finish();
        w.into_inner()
    }

    #[test]
    fn a_register_request_decodes_with_the_http_defaults() {
        let body = register_body(
            |w| {
                let mut s = Fields::new(w, 5);
                s.field("ID").str("web1");
                s.field("Port").int(8080);
                s.field("Service").str("web");
                s.field("Tags").array_len(0);
                {
                    let w = s.field("Weights");
                    let mut wf = Fields::new(w, 2);
                    wf.field("Passing").int(3);
                    wf.field("Warning").int(1);
                    wf.finish();
                }
                s.finish();
            },
            2,
        );
        let request = decode_register(&body, "dc1").unwrap();
        assert_eq!(request.token, "secret");
        assert_eq!(request.datacenter, "", "the request named none");
        let reg = request.registration;
        assert_eq!((reg.node.as_str(), reg.datacenter.as_str()), ("n1", "dc1"));
        let service = reg.service.unwrap();
        assert_eq!((service.name.as_str(), service.port), ("web", 8080));
        assert_eq!(
            service.weights,
            Some(Weights {
                passing: 3,
                warning: 1
            })
        );
        assert_eq!(reg.checks.len(), 2);
        assert_eq!(
            reg.checks[1].check_id, "check 1",
            "the ID defaults to the name"
        );
        assert_eq!(
            reg.checks[1].node, "n1",
            "the node defaults to the request's"
        );
    }

    /// The typed path takes a mesh gateway's `consul-wan-federation` meta key as the HTTP path
    /// does (a client agent's anti-entropy registers through it), and still refuses any other
    /// `consul-` key, and that one on another kind.
    #[test]
    fn only_a_mesh_gateway_may_carry_the_wan_federation_meta_key() {
        let with = |kind: &str, key: &str| {
            let body = register_body(
                |w| {
                    let mut s = Fields::new(w, 3);
                    s.field("Kind").str(kind);
                    {
                        let w = s.field("Meta");
                        w.map_len(1);
                        w.str(key);
                        w.str("1");
                    }
                    s.field("Service").str("gw");
                    s.finish();
                },
                0,
            );
            decode_register(&body, "dc1").map(|_| ())
        };
        assert_eq!(with("mesh-gateway", "consul-wan-federation"), Ok(()));
        assert!(with("mesh-gateway", "consul-other").is_err());
        assert!(with("", "consul-wan-federation").is_err());
    }

    #[test]
    fn bad_registrations_are_refused_with_consuls_words() {
        let any_address = register_body(
            |w| {
                let mut s = Fields::new(w, 2);
                s.field("Address").str("0.0.0.0");
                s.field("Service").str("web");
                s.finish();
            },
            0,
        );
        assert_eq!(
            decode_register(&any_address, "dc1").unwrap_err(),
            RegisterError::Invalid("Invalid service address".into())
        );
        let peer = register_body(
            |w| {
                let mut s = Fields::new(w, 2);
                s.field("PeerName").str("other");
                s.field("Service").str("web");
                s.finish();
            },
            0,
        );
        assert_eq!(
            decode_register(&peer, "dc1").unwrap_err().to_string(),
            PEER_REGISTRATION_REFUSED
        );
        let too_many = register_body(|w| w.nil(), REGISTRATION_CHECKS_MAX + 1);
        assert!(matches!(
            decode_register(&too_many, "dc1"),
            Err(RegisterError::Invalid(_))
        ));
        assert!(matches!(
            decode_register(&[0x91, 0x01], "dc1"),
            Err(RegisterError::Decode(_))
        ));
    }

    #[test]
    fn the_deprecated_single_tag_still_filters() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 3);
        f.field("ServiceName").str("web");
        f.field("ServiceTag").str("v1");
        f.field("TagFilter").bool(true);
        f.finish();
        let request = ServiceSpecificRequest::decode(&w.buf).unwrap();
        assert_eq!(request.required_tags(), &["v1"]);
    }
}
