//! Config entries as Consul reads and writes them: decoding a body (`PUT /v1/config`, the
//! agent's `config_entries.bootstrap`) into the store's [`ConfigEntry`] with Consul's
//! normalization and validation, and rendering an entry back as Consul's JSON.
//!
//! Errors come in Consul's two flavours: [`EntryError::Decode`] for a body that does not
//! decode (`Request decoding failed: …`, HTTP 400) and [`EntryError::Invalid`] for one that
//! decodes but fails `Normalize`/`Validate` (HTTP 500 in Consul, the RPC error text).
//!
//! Pure: the only time involved (an intention's legacy timestamps) is converted, never read.

pub mod doc;
pub mod exported;
pub mod intention;
pub mod schema;

use crate::consul::body::{normalize_key, parse_json};
use crate::store::mesh::config_entry::{
    ConfigEntry, ConfigKind, EntryBody, CONFIG_ENTRY_NAME_BYTES_MAX,
};
use crate::store::mesh::intentions::{META_KEY_BYTES_MAX, META_PAIRS_MAX, META_VALUE_BYTES_MAX};
use arcstr::ArcStr;
use doc::{decode_object, multierror, Decoding, Doc};
use serde_json::Value;

/// Why an entry was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryError {
    /// The body does not decode: Consul answers 400 `Request decoding failed: <reason>`.
    Decode(String),
    /// The entry decodes but is invalid: Consul answers 500 with the reason.
    Invalid(String),
}

impl EntryError {
    pub fn message(&self) -> &str {
        match self {
            EntryError::Decode(m) | EntryError::Invalid(m) => m,
        }
    }
}

/// The kind named by a body's `Kind` (or `kind`) key, with Consul's errors.
pub fn kind_of(value: &Value) -> Result<ConfigKind, EntryError> {
    let Value::Object(map) = value else {
        return Err(EntryError::Decode(
            "Payload does not contain a kind/Kind key at the top level".to_string(),
        ));
    };
    let raw = map.get("Kind").or_else(|| map.get("kind")).ok_or_else(|| {
        EntryError::Decode("Payload does not contain a kind/Kind key at the top level".to_string())
    })?;
    let Value::String(text) = raw else {
        return Err(EntryError::Decode(
            "Kind value in payload is not a string".to_string(),
        ));
    };
    ConfigKind::parse(text)
        .ok_or_else(|| EntryError::Decode(format!("invalid config entry kind: {text}")))
}

/// Decodes a request body into an entry.
pub fn decode_body(body: &[u8]) -> Result<ConfigEntry, EntryError> {
    let value = parse_json(body).map_err(EntryError::Decode)?;
    decode(&value)
}

/// The `(kind, name)` a body names, for the ACL check made before the handler; `None` when
/// the body does not decode (the handler answers that).
pub fn target_of(body: &[u8]) -> Option<(ConfigKind, String)> {
    let value = parse_json(body).ok()?;
    let kind = kind_of(&value).ok()?;
    let name = match kind {
        ConfigKind::Mesh => "mesh".to_string(),
        ConfigKind::ProxyDefaults => "global".to_string(),
        _ => value
            .as_object()?
            .iter()
            .find(|(k, _)| normalize_key(k) == "name")
            .and_then(|(_, v)| v.as_str())
            .unwrap_or_default()
            .to_string(),
    };
    Some((kind, name))
}

/// Decodes, normalizes and validates one entry, as Consul's `DecodeConfigEntry`,
/// `Normalize` and `Validate` do.
pub fn decode(value: &Value) -> Result<ConfigEntry, EntryError> {
    let kind = kind_of(value)?;
    let map = value.as_object().expect("kind_of accepted an object");
    // `Kind` is the decoder's selector, `Name` the entry's key: both are taken out before
    // the kind's own fields are decoded. A `mesh` entry has no name field at all.
    let mut rest = map.clone();
    let mut name = String::new();
    rest.retain(|k, v| {
        let key = normalize_key(k);
        if key == "kind" {
            return false;
        }
        if key == "name" && schema::has_name(kind) {
            name = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            return false;
        }
        true
    });
    let mut decoding = Decoding::default();
    let mut doc = decode_object(
        &Value::Object(rest),
        schema::fields(kind),
        "",
        &mut decoding,
    );
    decoding.into_result().map_err(EntryError::Decode)?;
    if name.len() > CONFIG_ENTRY_NAME_BYTES_MAX {
        return Err(EntryError::Invalid(format!(
            "Name exceeds maximum length {CONFIG_ENTRY_NAME_BYTES_MAX}"
        )));
    }
    let name = normalize_name(kind, name).map_err(EntryError::Invalid)?;
    normalize(kind, &mut doc);
    validate(kind, &name, &doc).map_err(EntryError::Invalid)?;
    into_entry(kind, name, doc)
}

/// Reads back an entry a server rendered (its JSON fields, as a typed reply carries them):
/// the same decoding into the kind's fields as [`decode`], without `Normalize` and
/// `Validate`, which ran when it was written (and a legacy intention's fields, which a
/// config-entry write may not set, are kept), and with its raft indexes. A client agent
/// renders what this returns with [`render`], so that its answer is the server's.
pub fn decode_stored(value: &Value) -> Result<ConfigEntry, EntryError> {
    let kind = kind_of(value)?;
    let map = value.as_object().expect("kind_of accepted an object");
    let index = |field: &str| map.get(field).and_then(Value::as_u64).unwrap_or(0);
    let name = match kind {
        ConfigKind::ProxyDefaults => "global".to_string(),
        ConfigKind::Mesh => "mesh".to_string(),
        _ => map
            .get("Name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    };
    let mut rest = map.clone();
    rest.retain(|k, _| !matches!(k.as_str(), "Kind" | "Name" | "CreateIndex" | "ModifyIndex"));
    let mut decoding = Decoding::default();
    let doc = decode_object(
        &Value::Object(rest),
        schema::fields(kind),
        "",
        &mut decoding,
    );
    decoding.into_result().map_err(EntryError::Decode)?;
    let mut entry = if kind == ConfigKind::ServiceIntentions {
        let intentions = intention::from_doc_stored(&name, &doc).map_err(EntryError::Invalid)?;
        ConfigEntry {
            kind,
            name: ArcStr::from(name),
            body: EntryBody::Intentions(std::sync::Arc::new(intentions)),
            protocol: ArcStr::new(),
            create_index: 0,
            modify_index: 0,
        }
    } else {
        into_entry(kind, name, doc)?
    };
    entry.create_index = index("CreateIndex");
    entry.modify_index = index("ModifyIndex");
    Ok(entry)
}

/// Consul's name rules per kind: `proxy-defaults` is `global`, `mesh` is `mesh`.
fn normalize_name(kind: ConfigKind, name: String) -> Result<String, String> {
    match kind {
        ConfigKind::ProxyDefaults => {
            if !name.is_empty() && name != "global" {
                return Err(format!(
                    "invalid name ({name:?}), only \"global\" is supported"
                ));
            }
            Ok("global".to_string())
        }
        ConfigKind::Mesh => Ok("mesh".to_string()),
        _ => Ok(name),
    }
}

fn lowercase(doc: &mut Doc, field: &str) {
    if let Some(Doc::Str(s)) = doc.get(field) {
        let lower = s.to_ascii_lowercase();
        doc.set(field, Doc::Str(lower));
    }
}

/// Consul's `Normalize` steps that change what is stored.
fn normalize(kind: ConfigKind, doc: &mut Doc) {
    match kind {
        ConfigKind::ServiceDefaults => {
            lowercase(doc, "Protocol");
            if let Some(Doc::Obj(_)) = doc.get("UpstreamConfig") {
                let mut upstream = doc.get("UpstreamConfig").cloned().expect("present");
                if let Some(Doc::List(items)) = upstream.get("Overrides").cloned() {
                    let items = items
                        .into_iter()
                        .map(|mut o| {
                            lowercase(&mut o, "Protocol");
                            o
                        })
                        .collect();
                    upstream.set("Overrides", Doc::List(items));
                }
                if let Some(mut defaults) = upstream.get("Defaults").cloned() {
                    lowercase(&mut defaults, "Protocol");
                    upstream.set("Defaults", defaults);
                }
                doc.set("UpstreamConfig", upstream);
            }
        }
        ConfigKind::IngressGateway => {
            if let Some(Doc::List(listeners)) = doc.get("Listeners").cloned() {
                let listeners = listeners
                    .into_iter()
                    .map(|mut l| {
                        lowercase(&mut l, "Protocol");
                        if l.str("Protocol").is_empty() {
                            l.set("Protocol", Doc::Str("tcp".to_string()));
                        }
                        l
                    })
                    .collect();
                doc.set("Listeners", Doc::List(listeners));
            }
        }
        _ => {}
    }
}

/// Consul's `validateConfigEntryMeta`, its reasons collected as multierror lists them.
fn meta_reasons(doc: &Doc) -> Vec<String> {
    let meta = doc.str_pairs("Meta");
    let mut reasons = Vec::new();
    if meta.len() > META_PAIRS_MAX {
        reasons.push(format!(
            "Meta exceeds maximum element count {META_PAIRS_MAX}"
        ));
    }
    for (k, v) in &meta {
        if k.len() > META_KEY_BYTES_MAX {
            reasons.push(format!(
                "Meta key {k:?} exceeds maximum length {META_KEY_BYTES_MAX}"
            ));
        }
        if v.len() > META_VALUE_BYTES_MAX {
            reasons.push(format!(
                "Meta value for key {k:?} exceeds maximum length {META_VALUE_BYTES_MAX}"
            ));
        }
    }
    reasons
}

fn as_multierror(reasons: Vec<String>) -> Result<(), String> {
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(multierror(&reasons))
    }
}

/// Consul's `isValidHTTPMethod`.
pub fn is_http_method(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE"
    )
}

fn check_proxy_mode(doc: &Doc) -> Result<(), String> {
    match doc.str("Mode") {
        "" | "direct" | "transparent" => Ok(()),
        other => Err(format!("invalid proxy mode: {other:?}")),
    }
}

/// Consul's `validateServiceSubset`: a DNS label of lower-case letters, digits and `-`.
fn valid_subset_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn validate(kind: ConfigKind, name: &str, doc: &Doc) -> Result<(), String> {
    match kind {
        ConfigKind::ServiceDefaults => validate_service_defaults(name, doc),
        ConfigKind::ProxyDefaults => {
            as_multierror(meta_reasons(doc))?;
            check_proxy_mode(doc)
        }
        ConfigKind::ServiceRouter => validate_router(name, doc),
        ConfigKind::ServiceSplitter => validate_splitter(name, doc),
        ConfigKind::ServiceResolver => validate_resolver(name, doc),
        ConfigKind::IngressGateway => validate_ingress(name, doc),
        ConfigKind::TerminatingGateway => validate_terminating(name, doc),
        // Intentions are validated once typed (`intention::from_doc`).
        ConfigKind::ServiceIntentions => Ok(()),
        ConfigKind::Mesh => as_multierror(meta_reasons(doc)),
        ConfigKind::ExportedServices => exported::validate(name, doc, meta_reasons(doc)),
    }
}

fn validate_service_defaults(name: &str, doc: &Doc) -> Result<(), String> {
    if name.is_empty() {
        return Err("Name is required".to_string());
    }
    if name == "*" {
        return Err(
            "service-defaults name must be the name of a service, and not a wildcard".to_string(),
        );
    }
    check_proxy_mode(doc)?;
    let mut reasons = meta_reasons(doc);
    let balance = doc.str("BalanceInboundConnections");
    if !balance.is_empty() && balance != "exact_balance" {
        reasons.push(format!(
            "invalid value for balance_inbound_connections: {balance}"
        ));
    }
    let upstream = doc
        .get("UpstreamConfig")
        .filter(|d| !matches!(d, Doc::Null));
    let destination = doc.get("Destination").filter(|d| !matches!(d, Doc::Null));
    if upstream.is_some() && destination.is_some() {
        reasons.push(
            "UpstreamConfig and Destination are mutually exclusive for service defaults"
                .to_string(),
        );
        return as_multierror(reasons);
    }
    if let Some(upstream) = upstream {
        for o in upstream.list("Overrides") {
            let who = o.str("Name");
            if who.is_empty() {
                reasons.push(format!(
                    "error in upstream override for {who}: Name is required"
                ));
            } else if who == "*" {
                reasons.push(format!(
                    "error in upstream override for {who}: Wildcard name is not supported"
                ));
            }
        }
        if let Some(defaults) = upstream.get("Defaults") {
            if !defaults.str("Name").is_empty() {
                reasons.push("error in upstream defaults: Name must be empty".to_string());
            }
        }
    }
    if let Some(destination) = destination {
        let addresses = destination.strs("Addresses");
        if addresses.is_empty() {
            reasons.push("Destination must contain at least one valid address".to_string());
        }
        let mut seen: Vec<&str> = Vec::new();
        for address in addresses {
            if seen.contains(&address) {
                reasons.push(format!("Duplicate address '{address}' is not allowed"));
                continue;
            }
            seen.push(address);
            let hostname = !address.is_empty()
                && !address.contains('*')
                && address.len() <= 253
                && address.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                });
            if address.parse::<std::net::IpAddr>().is_err() && !hostname {
                reasons.push(format!(
                    "Destination address '{address}' is invalid Could not validate address {address} as an IP or Hostname"
                ));
            }
        }
        let port = destination.int("Port");
        if !(1..=65535).contains(&port) {
            reasons.push(format!("Invalid Port number {port}"));
        }
    }
    as_multierror(reasons)
}

fn validate_http_match(i: usize, m: &Doc) -> Result<(), String> {
    let paths = ["PathExact", "PathPrefix", "PathRegex"]
        .iter()
        .filter(|f| !m.str(f).is_empty())
        .count();
    if paths > 1 {
        return Err(format!(
            "Route[{i}] should only contain at most one of PathExact, PathPrefix, or PathRegex"
        ));
    }
    for field in ["PathExact", "PathPrefix"] {
        let path = m.str(field);
        if !path.is_empty() && !path.starts_with('/') {
            return Err(format!(
                "Route[{i}] {field} doesn't start with '/': {path:?}"
            ));
        }
    }
    for (j, h) in m.list("Header").iter().enumerate() {
        if h.str("Name").is_empty() {
            return Err(format!(
                "Route[{i}] Header[{j}] missing required Name field"
            ));
        }
        let parts = h.bool("Present") as usize
            + ["Exact", "Prefix", "Suffix", "Regex"]
                .iter()
                .filter(|f| !h.str(f).is_empty())
                .count();
        if parts != 1 {
            return Err(format!(
                "Route[{i}] Header[{j}] should only contain one of Present, Exact, Prefix, Suffix, or Regex"
            ));
        }
    }
    for (j, q) in m.list("QueryParam").iter().enumerate() {
        if q.str("Name").is_empty() {
            return Err(format!(
                "Route[{i}] QueryParam[{j}] missing required Name field"
            ));
        }
        let parts = q.bool("Present") as usize
            + ["Exact", "Regex"]
                .iter()
                .filter(|f| !q.str(f).is_empty())
                .count();
        if parts != 1 {
            return Err(format!(
                "Route[{i}] QueryParam[{j}] should only contain one of Present, Exact, or Regex"
            ));
        }
    }
    let mut methods: Vec<&str> = Vec::new();
    for method in m.strs("Methods") {
        if !is_http_method(method) {
            return Err(format!(
                "Route[{i}] Methods contains an invalid method {method:?}"
            ));
        }
        if methods.contains(&method) {
            return Err(format!(
                "Route[{i}] Methods contains {method:?} more than once"
            ));
        }
        methods.push(method);
    }
    Ok(())
}

fn validate_router(name: &str, doc: &Doc) -> Result<(), String> {
    if name.is_empty() {
        return Err("Name is required".to_string());
    }
    as_multierror(meta_reasons(doc))?;
    for (i, route) in doc.list("Routes").iter().enumerate() {
        let http = route.get("Match").and_then(|m| m.get("HTTP"));
        if let Some(http) = http.filter(|h| !matches!(h, Doc::Null)) {
            validate_http_match(i, http)?;
        }
        if let Some(destination) = route.get("Destination") {
            let rewrites = !destination.str("PrefixRewrite").is_empty();
            let prefixed = http
                .is_some_and(|h| !h.str("PathPrefix").is_empty() || !h.str("PathExact").is_empty());
            if rewrites && !prefixed {
                return Err(format!(
                    "Route[{i}] cannot make use of PrefixRewrite without configuring either PathExact or PathPrefix"
                ));
            }
            for field in ["RequestTimeout", "IdleTimeout"] {
                if destination.str(field).starts_with('-') {
                    return Err(format!("Route[{i}] {field} cannot be negative"));
                }
            }
        }
    }
    Ok(())
}

fn validate_splitter(name: &str, doc: &Doc) -> Result<(), String> {
    if name.is_empty() {
        return Err("Name is required".to_string());
    }
    as_multierror(meta_reasons(doc))?;
    let splits = doc.list("Splits");
    if splits.is_empty() {
        return Err("no splits configured".to_string());
    }
    let mut seen: Vec<(String, String)> = Vec::new();
    for split in splits {
        let service = match split.str("Service") {
            "" => name.to_string(),
            s => s.to_string(),
        };
        let key = (service, split.str("ServiceSubset").to_string());
        if seen.contains(&key) {
            return Err(format!(
                "split destination occurs more than once: service={:?}, subset={:?}",
                key.0, key.1
            ));
        }
        seen.push(key);
    }
    // Consul sums weights scaled to hundredths of a percent.
    let scaled: i64 = splits
        .iter()
        .map(|s| match s.get("Weight") {
            Some(Doc::Float(f)) => (f * 100.0).round() as i64,
            Some(Doc::Int(i)) => i * 100,
            _ => 0,
        })
        .sum();
    if scaled != 100 * 100 {
        return Err(format!(
            "the sum of all split weights must be 100, not {:.6}",
            scaled as f64 / 100.0
        ));
    }
    Ok(())
}

fn validate_resolver(name: &str, doc: &Doc) -> Result<(), String> {
    if name.is_empty() {
        return Err("Name is required".to_string());
    }
    as_multierror(meta_reasons(doc))?;
    let subsets = validate_resolver_subsets(doc)?;
    let default_subset = doc.str("DefaultSubset");
    if !default_subset.is_empty() && !subsets.contains(&default_subset) {
        return Err(format!(
            "DefaultSubset {default_subset:?} is not a valid subset"
        ));
    }
    if let Some(redirect) = doc.get("Redirect").filter(|d| !matches!(d, Doc::Null)) {
        if !doc.pairs("Failover").is_empty() {
            return Err("Redirect and Failover cannot both be set".to_string());
        }
        validate_resolver_redirect(name, redirect, &subsets)?;
    }
    for (subset, failover) in doc.pairs("Failover") {
        validate_resolver_failover(name, subset, failover, &subsets)?;
    }
    for field in ["ConnectTimeout", "RequestTimeout"] {
        let value = doc.str(field);
        if value.starts_with('-') {
            return Err(format!("Bad {field} '{value}', must be >= 0"));
        }
    }
    Ok(())
}

/// A resolver's subsets: every name valid (all names are checked before any filter), every
/// filter one that parses. Returns the subset names.
fn validate_resolver_subsets(doc: &Doc) -> Result<Vec<&str>, String> {
    let subsets: Vec<&str> = doc
        .pairs("Subsets")
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    for subset in &subsets {
        if subset.is_empty() {
            return Err("Subset defined with empty name".to_string());
        }
        if !valid_subset_name(subset) {
            return Err(format!(
                "Subset {subset:?} is invalid: must be 63 characters or less, begin or end with lower case alphanumeric characters, and contain lower case alphanumeric characters or '-' in between"
            ));
        }
    }
    for (subset, body) in doc.pairs("Subsets") {
        let filter = body.str("Filter");
        if !filter.is_empty() {
            if let Err(e) = crate::consul::filter::Filter::parse(
                filter,
                crate::consul::filter::CHECK_SERVICE_NODE,
            ) {
                return Err(format!("Bad Subsets[{subset:?}].Filter: {e}"));
            }
        }
    }
    Ok(subsets)
}

/// A resolver's `Redirect`: names somewhere, not both a peer and a datacenter, and a subset
/// only of a named service (of this one: one of its subsets).
fn validate_resolver_redirect(name: &str, redirect: &Doc, subsets: &[&str]) -> Result<(), String> {
    let empty = [
        "Service",
        "ServiceSubset",
        "Datacenter",
        "Peer",
        "SamenessGroup",
    ]
    .iter()
    .all(|f| redirect.str(f).is_empty());
    if empty {
        return Err("Redirect is empty".to_string());
    }
    if !redirect.str("Peer").is_empty() && !redirect.str("Datacenter").is_empty() {
        return Err("Redirect.Peer cannot be set with Redirect.Datacenter".to_string());
    }
    let service = redirect.str("Service");
    let subset = redirect.str("ServiceSubset");
    if service.is_empty() && !subset.is_empty() {
        return Err("Redirect.ServiceSubset defined without Redirect.Service".to_string());
    }
    if service == name && !subset.is_empty() && !subsets.contains(&subset) {
        return Err(format!(
            "Redirect.ServiceSubset {subset:?} is not a valid subset of {service:?}"
        ));
    }
    Ok(())
}

/// One `Failover[subset]` of a resolver: of a known subset (or `*`), naming somewhere to go,
/// with a subset of this service only if it has it, and no empty datacenter.
fn validate_resolver_failover(
    name: &str,
    subset: &str,
    failover: &Doc,
    subsets: &[&str],
) -> Result<(), String> {
    if subset != "*" && !subsets.contains(&subset) {
        return Err(format!("Bad Failover[{subset:?}]: not a valid subset"));
    }
    let empty = ["Service", "ServiceSubset", "SamenessGroup"]
        .iter()
        .all(|f| failover.str(f).is_empty())
        && failover.list("Datacenters").is_empty()
        && failover.list("Targets").is_empty();
    if empty {
        return Err(format!(
            "Bad Failover[{subset:?}]: one of Service, ServiceSubset, Namespace, Targets, SamenessGroup, or Datacenters is required"
        ));
    }
    let failover_subset = failover.str("ServiceSubset");
    let failover_service = failover.str("Service");
    if !failover_subset.is_empty()
        && (failover_service.is_empty() || failover_service == name)
        && !subsets.contains(&failover_subset)
    {
        return Err(format!(
            "Bad Failover[{subset:?}].ServiceSubset {failover_subset:?} is not a valid subset of {failover_service:?}"
        ));
    }
    if failover.strs("Datacenters").iter().any(|dc| dc.is_empty()) {
        return Err(format!(
            "Bad Failover[{subset:?}].Datacenters: found empty datacenter"
        ));
    }
    Ok(())
}

/// Consul's names of the TLS versions an entry may set, sorted as its error lists them.
const TLS_VERSIONS: [&str; 5] = ["TLS_AUTO", "TLSv1_0", "TLSv1_1", "TLSv1_2", "TLSv1_3"];

/// The TLS 1.2 cipher suites (IANA names) Consul lets an Envoy listener use.
const ENVOY_CIPHER_SUITES: [&str; 14] = [
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
];

/// A gateway's `TLS` block as Consul's `validateGatewayTLSConfig` checks it: known
/// versions, a maximum not below the minimum, and cipher suites only with a minimum of
/// TLS 1.2 or lower, each one Envoy knows.
fn validate_gateway_tls(tls: &Doc) -> Result<(), String> {
    let (min, max) = (tls.str("TLSMinVersion"), tls.str("TLSMaxVersion"));
    for version in [min, max] {
        if !version.is_empty() && !TLS_VERSIONS.contains(&version) {
            return Err(format!(
                "no matching TLS version found for {version}, please specify one of [{}]",
                TLS_VERSIONS.join(", ")
            ));
        }
    }
    // `TLS_AUTO` compares with nothing, as in Consul.
    let rank = |v: &str| TLS_VERSIONS[1..].iter().position(|k| *k == v);
    if let (Some(low), Some(high)) = (rank(min), rank(max)) {
        if high < low {
            return Err(format!(
                "configuring max version {max} less than the configured min version {min} is invalid"
            ));
        }
    }
    let suites = tls.strs("CipherSuites");
    if !suites.is_empty() {
        if !matches!(min, "" | "TLS_AUTO" | "TLSv1_0" | "TLSv1_1" | "TLSv1_2") {
            return Err(
                "configuring CipherSuites is only supported for TLS 1.2 and earlier".to_string(),
            );
        }
        let unknown: Vec<&str> = suites
            .into_iter()
            .filter(|s| !ENVOY_CIPHER_SUITES.contains(s))
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "no matching Envoy TLS cipher suite found for {}",
                unknown.join(",")
            ));
        }
    }
    Ok(())
}

fn validate_ingress(_name: &str, doc: &Doc) -> Result<(), String> {
    as_multierror(meta_reasons(doc))?;
    if let Some(tls) = doc.get("TLS") {
        validate_gateway_tls(tls)?;
    }
    let tls_enabled = doc.get("TLS").is_some_and(|t| t.bool("Enabled"));
    let mut ports: Vec<i64> = Vec::new();
    for listener in doc.list("Listeners") {
        let port = listener.int("Port");
        if ports.contains(&port) {
            return Err(format!("port {port} declared on two listeners"));
        }
        ports.push(port);
        validate_ingress_listener(listener, port, tls_enabled)?;
    }
    Ok(())
}

/// One ingress listener: a known protocol, at least one service (several, or a wildcard,
/// only for `http`), its own TLS block, and each service and host once.
fn validate_ingress_listener(listener: &Doc, port: i64, tls_enabled: bool) -> Result<(), String> {
    let protocol = listener.str("Protocol");
    if !matches!(protocol, "tcp" | "http" | "http2" | "grpc") {
        return Err(format!(
            "protocol must be 'tcp', 'http', 'grpc' or 'http2'. '{protocol}' is an unsupported protocol"
        ));
    }
    let services = listener.list("Services");
    if services.is_empty() {
        return Err(format!("No service declared for listener with port {port}"));
    }
    if let Some(tls) = listener.get("TLS") {
        validate_gateway_tls(tls)?;
    }
    if protocol != "http" && services.len() > 1 {
        return Err(format!(
            "Multiple services per listener are only supported for protocol = 'http' (listener on port {port})"
        ));
    }
    let mut hosts: Vec<&str> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for service in services {
        let service_name = service.str("Name");
        if service_name == "*" && protocol != "http" {
            return Err(format!(
                "Wildcard service name is only valid for protocol = 'http' (listener on port {port})"
            ));
        }
        if service_name.is_empty() {
            return Err(format!(
                "Service name cannot be blank (listener on port {port})"
            ));
        }
        validate_ingress_service_headers(service, service_name, protocol, port)?;
        let service_hosts = service.strs("Hosts");
        if service_name == "*" && !service_hosts.is_empty() {
            return Err(format!(
                "Associating hosts to a wildcard service is not supported (listener on port {port})"
            ));
        }
        if names.contains(&service_name) {
            return Err(format!(
                "Service {service_name} cannot be added multiple times (listener on port {port})"
            ));
        }
        names.push(service_name);
        if protocol == "tcp" && !service_hosts.is_empty() {
            return Err(format!(
                "Associating hosts to a service is not supported for the tcp protocol (listener on port {port})"
            ));
        }
        for host in service_hosts {
            if hosts.contains(&host) {
                return Err(format!(
                    "Hosts must be unique within a specific listener (listener on port {port})"
                ));
            }
            hosts.push(host);
            validate_ingress_host(host, tls_enabled)?;
        }
    }
    Ok(())
}

/// Header changes on an ingress service need an HTTP-family protocol.
fn validate_ingress_service_headers(
    service: &Doc,
    service_name: &str,
    protocol: &str,
    port: i64,
) -> Result<(), String> {
    for (key, what) in [
        ("RequestHeaders", "request headers"),
        ("ResponseHeaders", "response headers"),
    ] {
        // Stored as given (an opaque map): set when it adds, sets or removes any.
        let set = match service.get(key) {
            Some(Doc::Raw(h)) => {
                ["Add", "Set"]
                    .iter()
                    .any(|k| h[*k].as_object().is_some_and(|m| !m.is_empty()))
                    || h["Remove"].as_array().is_some_and(|r| !r.is_empty())
            }
            _ => false,
        };
        if set && protocol == "tcp" {
            return Err(format!(
                "{what} only valid for http, http2 and grpc protocols (service {service_name:?} on listener on port {port})"
            ));
        }
    }
    Ok(())
}

/// An ingress host: a wildcard only as the leftmost label, and `*` alone not under TLS
/// (every host becomes a DNS SAN).
fn validate_ingress_host(host: &str, tls_enabled: bool) -> Result<(), String> {
    if host.contains('*') && !host.starts_with("*.") && host != "*" {
        return Err(format!(
            "Host '{host}' is not valid, a wildcard specifier is only allowed as the leftmost label"
        ));
    }
    if host == "*" && tls_enabled {
        return Err(
            "Host '*' is not allowed when TLS is enabled, all hosts must be valid DNS records to add as a DNSSAN"
                .to_string(),
        );
    }
    Ok(())
}

fn validate_terminating(_name: &str, doc: &Doc) -> Result<(), String> {
    as_multierror(meta_reasons(doc))?;
    let mut seen: Vec<&str> = Vec::new();
    for service in doc.list("Services") {
        let service_name = service.str("Name");
        if service_name.is_empty() {
            return Err("Service name cannot be blank.".to_string());
        }
        if seen.contains(&service_name) {
            return Err(format!(
                "Service {service_name:?} was specified more than once within a namespace"
            ));
        }
        seen.push(service_name);
        let (ca, cert, key) = (
            service.str("CAFile"),
            service.str("CertFile"),
            service.str("KeyFile"),
        );
        if (!cert.is_empty() || !key.is_empty())
            && (ca.is_empty() || cert.is_empty() || key.is_empty())
        {
            return Err(format!(
                "Service {service_name:?} must have a CertFile, CAFile, and KeyFile specified for TLS origination"
            ));
        }
    }
    Ok(())
}

/// The store row for a validated document.
fn into_entry(kind: ConfigKind, name: String, doc: Doc) -> Result<ConfigEntry, EntryError> {
    let protocol = match kind {
        ConfigKind::ServiceDefaults => doc.str("Protocol").to_string(),
        ConfigKind::ProxyDefaults => match doc.get("Config") {
            Some(Doc::Raw(Value::Object(config))) => config
                .get("protocol")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_ascii_lowercase(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    let body = if kind == ConfigKind::ServiceIntentions {
        let intentions = intention::from_doc(&name, &doc).map_err(EntryError::Invalid)?;
        EntryBody::Intentions(std::sync::Arc::new(intentions))
    } else {
        EntryBody::Json(ArcStr::from(doc.to_json()))
    };
    Ok(ConfigEntry {
        kind,
        name: ArcStr::from(name),
        body,
        protocol: ArcStr::from(protocol),
        create_index: 0,
        modify_index: 0,
    })
}

/// The compact JSON of an entry, as Consul renders it.
pub fn render_compact(entry: &ConfigEntry, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"Kind\":");
    crate::consul::json::write_str(out, entry.kind.as_str());
    if schema::has_name(entry.kind) {
        out.extend_from_slice(b",\"Name\":");
        crate::consul::json::write_str(out, &entry.name);
    }
    let inner: String = match &entry.body {
        EntryBody::Json(text) => text.to_string(),
        EntryBody::Intentions(body) => intention::to_doc(body).to_json(),
    };
    // The stored object without its braces, spliced between the name and the indexes.
    let fields = inner
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or_default();
    if !fields.is_empty() {
        out.push(b',');
        out.extend_from_slice(fields.as_bytes());
    }
    out.extend_from_slice(b",\"CreateIndex\":");
    out.extend_from_slice(entry.create_index.to_string().as_bytes());
    out.extend_from_slice(b",\"ModifyIndex\":");
    out.extend_from_slice(entry.modify_index.to_string().as_bytes());
    out.push(b'}');
}

/// An entry as Consul renders it, compact or indented.
pub fn render(entry: &ConfigEntry, pretty: bool, out: &mut Vec<u8>) {
    if pretty {
        let mut compact = Vec::with_capacity(256);
        render_compact(entry, &mut compact);
        doc::indent(&compact, out);
    } else {
        render_compact(entry, out);
    }
}

/// A list of entries as Consul renders it (`[]` when empty).
pub fn render_list<'e>(
    entries: impl Iterator<Item = &'e ConfigEntry>,
    pretty: bool,
    out: &mut Vec<u8>,
) {
    let mut compact = Vec::with_capacity(512);
    compact.push(b'[');
    for (i, entry) in entries.enumerate() {
        if i > 0 {
            compact.push(b',');
        }
        render_compact(entry, &mut compact);
    }
    compact.push(b']');
    if pretty {
        doc::indent(&compact, out);
    } else {
        out.extend_from_slice(&compact);
    }
}

/// The parsed JSON fields of a non-intentions entry (for readers such as the discovery
/// chain and the sidecar's proxy configuration).
pub fn fields_of(entry: &ConfigEntry) -> Value {
    match &entry.body {
        EntryBody::Json(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        EntryBody::Intentions(body) => {
            serde_json::from_str(&intention::to_doc(body).to_json()).unwrap_or(Value::Null)
        }
    }
}

#[cfg(test)]
mod tests;
