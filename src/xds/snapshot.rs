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
use crate::consul::discovery_chain::{self, Overrides};
use crate::consul::filter::{self, Filter};
use crate::consul::render;
use crate::store::catalog::read::{connect_rows, proxy_destination, CheckServiceNode};
use crate::store::catalog::Status;
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

/// What the server knows beyond the proxy: where it runs and the mesh's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdsSettings {
    pub datacenter: String,
    /// Whether a connection no intention matches is allowed (ACLs off, or the ACL default
    /// policy `allow`), as Consul's default intention policy follows the ACL default.
    pub default_allow: bool,
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
}

/// One service an ingress listener exposes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressService {
    /// The ID of its upstream in [`Snapshot::upstreams`] (the service's name).
    pub upstream: String,
    /// The `Host` values that reach it on an HTTP listener: the entry's `Hosts`, else
    /// Consul's `<service>.ingress.*`, each also with the listener's port.
    pub domains: Vec<String>,
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
    /// Settings of the gateway's config entry that praetor accepts but does not apply yet
    /// (`Listeners[0].TLS`, …), for the watcher to warn about.
    pub unapplied: Vec<String>,
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
/// its entry spells them.
pub fn build(
    registration: &ProxyRegistration,
    leaf: &LeafCert,
    service_leaves: &BTreeMap<String, LeafCert>,
    tables: &Tables,
    settings: &XdsSettings,
) -> Result<Snapshot, String> {
    let ca = &tables.mesh.ca;
    let trust_domain = ca
        .trust_domain()
        .ok_or_else(|| "the Connect CA is not initialized yet".to_string())?;
    let mut roots_pem: Vec<String> = Vec::with_capacity(ca.roots.len());
    if let Some(active) = ca.active_root() {
        roots_pem.push(active.root_cert_pem.to_string());
    }
    for root in ca.roots.iter().filter(|r| !r.active) {
        roots_pem.push(root.root_cert_pem.to_string());
    }
    let destination = registration.destination_name.clone();
    if registration.kind.is_gateway() {
        return build_gateway(
            registration,
            (leaf, service_leaves),
            tables,
            settings,
            trust_domain,
            roots_pem,
        );
    }
    let protocol = config_str(&registration.config, "protocol")
        .map(str::to_string)
        .unwrap_or_else(|| service_protocol(tables, &destination).to_string());
    let inbound = Inbound {
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
        sources: intention_sources(tables, &destination)?,
    };
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
            ..Overrides::default()
        };
        upstreams.push(compile_upstream(
            tables,
            settings,
            &trust_domain,
            UpstreamSpec {
                id: upstream.id(),
                destination: &upstream.destination_name,
                datacenter,
                overrides,
                bind_address: upstream.bind_address.clone(),
                bind_port: upstream.bind_port,
            },
        )?);
    }
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
        unapplied: Vec::new(),
    })
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

/// An upstream with its discovery chain compiled against `tables`.
fn compile_upstream(
    tables: &Tables,
    settings: &XdsSettings,
    trust_domain: &str,
    spec: UpstreamSpec<'_>,
) -> Result<Upstream, String> {
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
    let (nodes, targets) = chain_parts(chain, tables, trust_domain, &settings.datacenter)?;
    Ok(Upstream {
        id: spec.id,
        destination: spec.destination.to_string(),
        datacenter: spec.datacenter,
        bind_address: spec.bind_address,
        bind_port: spec.bind_port,
        protocol: chain["Protocol"].as_str().unwrap_or("tcp").to_string(),
        start: chain["StartNode"].as_str().unwrap_or_default().to_string(),
        nodes,
        targets,
    })
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
    tables: &Tables,
    settings: &XdsSettings,
    trust_domain: String,
    roots_pem: Vec<String>,
) -> Result<Snapshot, String> {
    let bind_address = Some(registration.address.clone())
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| PUBLIC_BIND_ADDRESS_DEFAULT.to_string());
    let mut upstreams: Vec<Upstream> = Vec::new();
    let mut ingress: Vec<IngressListener> = Vec::new();
    if registration.kind == ProxyKind::IngressGateway {
        let rows = gateways::gateway_rows(tables, &registration.service);
        if rows.len() > GATEWAY_SERVICES_MAX {
            return Err(format!(
                "gateway {:?} links {} services; at most {GATEWAY_SERVICES_MAX} are served",
                registration.service,
                rows.len()
            ));
        }
        for row in rows {
            if row.gateway_kind != GatewayKind::Ingress {
                continue;
            }
            let service = row.service.to_string();
            if !upstreams.iter().any(|u| u.id == service) {
                upstreams.push(compile_upstream(
                    tables,
                    settings,
                    &trust_domain,
                    UpstreamSpec {
                        id: service.clone(),
                        destination: &service,
                        datacenter: settings.datacenter.clone(),
                        overrides: Overrides::default(),
                        bind_address: bind_address.clone(),
                        bind_port: 0,
                    },
                )?);
            }
            let hosts: Vec<String> = row.hosts.iter().map(|h| h.to_string()).collect();
            let exposed = IngressService {
                domains: ingress_domains(&service, &hosts, row.port),
                upstream: service,
            };
            match ingress.iter_mut().find(|l| l.port == row.port) {
                Some(listener) => listener.services.push(exposed),
                None => ingress.push(IngressListener {
                    bind_address: bind_address.clone(),
                    port: row.port,
                    protocol: row.protocol.to_string(),
                    services: vec![exposed],
                }),
            }
        }
        ingress.sort_by_key(|l| l.port);
    }
    let mut terminating = Vec::new();
    if registration.kind == ProxyKind::TerminatingGateway {
        for name in terminating_services(tables, &registration.service)? {
            // A service whose leaf is not signed yet is left out until it is, as Consul
            // waits for it.
            let Some(service_leaf) = service_leaves.get(&name) else {
                continue;
            };
            let row = gateways::gateway_rows(tables, &registration.service)
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
    }
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
        unapplied: if registration.kind == ProxyKind::IngressGateway {
            ingress_unapplied(tables, &registration.service)
        } else {
            Vec::new()
        },
    })
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

/// The settings of an ingress gateway's entry its listeners do not apply yet: TLS (the
/// gateway's leaf or SDS), the connection limits and header changes.
fn ingress_unapplied(tables: &Tables, gateway: &str) -> Vec<String> {
    use crate::store::mesh::config_entry::{get, ConfigKind, EntryBody};
    let Some(entry) = get(tables, ConfigKind::IngressGateway, gateway) else {
        return Vec::new();
    };
    let EntryBody::Json(text) = &entry.body else {
        return Vec::new();
    };
    let Ok(body) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for key in ["TLS", "Defaults"] {
        if set(&body[key]) {
            out.push(key.to_string());
        }
    }
    for (l, listener) in body["Listeners"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if set(&listener["TLS"]) {
            out.push(format!("Listeners[{l}].TLS"));
        }
        for (i, service) in listener["Services"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for key in [
                "TLS",
                "RequestHeaders",
                "ResponseHeaders",
                "MaxConnections",
                "MaxPendingRequests",
                "MaxConcurrentRequests",
                "PassiveHealthCheck",
            ] {
                if set(&service[key]) {
                    out.push(format!("Listeners[{l}].Services[{i}].{key}"));
                }
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
    tables: &Tables,
    trust_domain: &str,
    local_datacenter: &str,
) -> Result<ChainParts, String> {
    let mut nodes = BTreeMap::new();
    for (key, node) in chain["Nodes"].as_object().into_iter().flatten() {
        let parsed = match node["Type"].as_str() {
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
                    .map(|r| {
                        let definition = &r["Definition"];
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
                            retry_on_connect_failure: dest["RetryOnConnectFailure"]
                                .as_bool()
                                .unwrap_or(false),
                            retry_on_status_codes: dest["RetryOnStatusCodes"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(|c| c.as_u64().map(|c| c as u32))
                                .collect(),
                            next: field(r, "NextNode"),
                        }
                    })
                    .collect(),
            ),
            other => return Err(format!("unknown discovery chain node type {other:?}")),
        };
        nodes.insert(key.clone(), parsed);
    }
    let mut targets = BTreeMap::new();
    for (id, target) in chain["Targets"].as_object().into_iter().flatten() {
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
        let endpoints = if datacenter != local_datacenter {
            // Another datacenter's instances arrive with federation of the snapshot's
            // data source; until then its target has no endpoints.
            Vec::new()
        } else {
            match &filter {
                Ok(filter) => endpoints(tables, &service, only_passing, filter.as_ref())?,
                Err(_) => Vec::new(),
            }
        };
        targets.insert(
            id.clone(),
            Target {
                id: id.clone(),
                spiffe_id: spiffe_id(trust_domain, &datacenter, &service),
                subset: field(target, "ServiceSubset"),
                sni: field(target, "SNI"),
                connect_timeout_ms: millis(&target["ConnectTimeout"]),
                service,
                datacenter,
                endpoints,
            },
        );
    }
    Ok((nodes, targets))
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
        let node = view.node();
        let address = if instance.address.is_empty() {
            node.address.to_string()
        } else {
            instance.address.to_string()
        };
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

/// Whether `protocol` is served at L7 (HTTP connection manager) rather than TCP.
pub fn is_l7(protocol: &str) -> bool {
    is_http_family(protocol)
}
