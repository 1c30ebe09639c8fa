//! The Connect CA and authorization endpoints: `/v1/connect/ca/roots` (blocking),
//! `/v1/connect/ca/configuration` (GET, and PUT with root rotation), the agent's
//! `/v1/agent/connect/ca/roots` and `POST /v1/agent/connect/authorize`, the servers'
//! internal signing endpoint that agents send their leaf CSRs to, and the primary's
//! internal endpoint that signs a secondary datacenter's intermediate.
//!
//! Signing and rotation run on the leader (a follower forwards), so a leaf is always signed
//! by the newest active root. The root's key never leaves the servers: roots are rendered
//! without it. Authorization is [`intentions::decide`] on the shard's version, after the
//! client certificate's URI is checked to be a service SPIFFE ID of a trust domain this
//! cluster's roots were made under.

use super::intentions::{default_allow, require_connect, require_connect_here};
use super::rpc::{client_config, client_connect};
use super::{run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request, WriteOp};
use crate::config::connect::CaSettings;
use crate::consul::bodies;
use crate::consul::body::{parse_strict, Obj};
use crate::consul::config_entry::doc::{self, Doc};
use crate::consul::rpc::connect_ca::CaConfiguration;
use crate::proto::http::Method;
use crate::proto::rfc3339;
use crate::proto::spiffe::{self, SpiffeError};
use crate::shard::watch::WatchSet;
use crate::store::mesh::ca::{self, CaConfig, CaOp, CaRoot, CaState};
use crate::store::mesh::intentions::{self, Action, Decision};
use crate::store::{Command, CommandResult, StoreVersion, Table, Tables};
use crate::tls::connect_ca;
use arcstr::ArcStr;
use std::sync::Arc;

/// Consul's refusal of `SignIntermediate` outside the primary datacenter.
pub const NOT_PRIMARY: &str = "not the primary datacenter";

fn unix_s(ns: i64) -> i64 {
    ns / 1_000_000_000
}

fn time_text(unix_s: i64) -> String {
    rfc3339::format_ns(unix_s.saturating_mul(1_000_000_000))
}

/// A root as Consul's `CARoot` JSON, without its signing key.
fn root_doc(root: &CaRoot) -> Doc {
    let intermediates = if root.intermediate_certs.is_empty() {
        Doc::Null
    } else {
        Doc::List(
            root.intermediate_certs
                .iter()
                .map(|c| Doc::Str(c.to_string()))
                .collect(),
        )
    };
    Doc::Obj(vec![
        ("ID".into(), Doc::Str(root.id.to_string())),
        ("Name".into(), Doc::Str(root.name.to_string())),
        // Consul's serial is unsigned; a cast to i64 would print a high one negative.
        (
            "SerialNumber".into(),
            Doc::Raw(serde_json::Value::from(root.serial_number)),
        ),
        (
            "SigningKeyID".into(),
            Doc::Str(root.signing_key_id.to_string()),
        ),
        (
            "ExternalTrustDomain".into(),
            Doc::Str(root.external_trust_domain.to_string()),
        ),
        (
            "NotBefore".into(),
            Doc::Str(time_text(root.not_before_unix_s)),
        ),
        (
            "NotAfter".into(),
            Doc::Str(time_text(root.not_after_unix_s)),
        ),
        ("RootCert".into(), Doc::Str(root.root_cert_pem.to_string())),
        ("IntermediateCerts".into(), intermediates),
        ("Active".into(), Doc::Bool(root.active)),
        (
            "PrivateKeyType".into(),
            Doc::Str(root.private_key_type.to_string()),
        ),
        (
            "PrivateKeyBits".into(),
            Doc::Int(root.private_key_bits as i64),
        ),
        ("CreateIndex".into(), Doc::Int(root.create_index as i64)),
        ("ModifyIndex".into(), Doc::Int(root.modify_index as i64)),
    ])
}

/// Consul's `IndexedCARoots` JSON.
pub fn roots_doc(state: &CaState) -> Doc {
    let active = state
        .active_root()
        .map(|r| r.id.to_string())
        .unwrap_or_default();
    let roots: Vec<&CaRoot> = state.roots.iter().map(|r| &**r).collect();
    roots_doc_of(active, state.trust_domain().unwrap_or_default(), &roots)
}

/// [`roots_doc`] of its parts (a client agent's `ConnectCA.Roots` reply).
fn roots_doc_of(active_root_id: String, trust_domain: String, roots: &[&CaRoot]) -> Doc {
    let roots = if roots.is_empty() {
        Doc::Null
    } else {
        Doc::List(roots.iter().map(|r| root_doc(r)).collect())
    };
    Doc::Obj(vec![
        ("ActiveRootID".into(), Doc::Str(active_root_id)),
        ("TrustDomain".into(), Doc::Str(trust_domain)),
        ("Roots".into(), roots),
    ])
}

/// The answer to a roots read: `?pem`'s certificate chain (each root, then its
/// intermediates), else the `IndexedCARoots` JSON. A client agent answers `ConnectCA.Roots`'
/// reply with it.
pub fn roots_answer(
    active_root_id: String,
    trust_domain: String,
    roots: &[&CaRoot],
    pem: bool,
    headers: &[u8],
    reply: &mut Reply,
) {
    if pem {
        let mut chain = String::new();
        for root in roots {
            chain.push_str(root.root_cert_pem.trim_end());
            chain.push('\n');
            for intermediate in &root.intermediate_certs {
                chain.push_str(intermediate.trim_end());
                chain.push('\n');
            }
        }
        reply.send(
            200,
            Some("application/pem-certificate-chain"),
            headers,
            chain.as_bytes(),
        );
        return;
    }
    send_doc(
        reply,
        headers,
        &roots_doc_of(active_root_id, trust_domain, roots),
    );
}

fn send_doc(reply: &mut Reply, headers: &[u8], body: &Doc) {
    let compact = body.to_json();
    if reply.pretty {
        let mut out = Vec::with_capacity(compact.len() + compact.len() / 4);
        doc::indent(compact.as_bytes(), &mut out);
        reply.json_bytes(200, headers, &out);
    } else {
        reply.json_bytes(200, headers, compact.as_bytes());
    }
}

struct RootsQuery {
    pem: bool,
}

impl Query for RootsQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            ca::roots_index(tables),
            WatchSet::new().key(Table::ConnectCa, Arc::<str>::from(ca::ROOTS_WATCH_KEY)),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        let state = &tables.mesh.ca;
        let active = state
            .active_root()
            .map(|r| r.id.to_string())
            .unwrap_or_default();
        let roots: Vec<&CaRoot> = state.roots.iter().map(|r| &**r).collect();
        roots_answer(
            active,
            state.trust_domain().unwrap_or_default(),
            &roots,
            self.pem,
            &headers,
            reply,
        );
    }
}

/// `GET /v1/connect/ca/roots` and `/v1/agent/connect/ca/roots`.
pub fn roots(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    roots_in(ctx, request, reply, "")
}

/// A roots read here, by this datacenter's `ConnectCA.Roots` (a client agent, or a
/// follower's read for the leader), or by `datacenter`'s (not empty: named by `?dc=`,
/// whose servers check that Connect is on there).
fn roots_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_connect_here(ctx, datacenter)?;
    let options = client_config::options_in(ctx, request, datacenter)?;
    let pem = request
        .query
        .get("pem")
        .is_some_and(|v| v == "true" || v.is_empty());
    if !datacenter.is_empty() || ctx.reads_by_call(&options) {
        return Ok(client_connect::roots(
            ctx, request, options, pem, datacenter,
        ));
    }
    run_query(ctx, RootsQuery { pem }, options, reply)
}

/// A Connect CA request naming another datacenter (`?dc=`): the roots and the CA
/// configuration, parsed and checked as their handlers do, then that datacenter's typed
/// call. `None` for the other paths.
pub fn elsewhere(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    let handler: super::DatacenterHandler = match request.path {
        "/v1/connect/ca/roots" => roots_in,
        "/v1/connect/ca/configuration" => configuration_in,
        _ => return None,
    };
    Some(super::run_for_datacenter(ctx, request, datacenter, handler))
}

/// What the CA configuration's reads depend on: its `ModifyIndex` (at least 1) and its key.
pub fn ca_config_index(tables: &Tables) -> (u64, WatchSet) {
    let index = tables.mesh.ca.config.as_ref().map_or(0, |c| c.modify_index);
    (
        index.max(1),
        WatchSet::new().key(Table::ConnectCa, Arc::<str>::from(ca::CONFIG_WATCH_KEY)),
    )
}

/// The refusal of a CA configuration read before the leader wrote the first one.
pub const CA_NOT_INITIALIZED: &str = "CA has not finished initializing";

/// The stored configuration as Consul's `CAConfiguration` carries it: `Config` the map as
/// it was written.
pub fn ca_configuration_of(config: &CaConfig) -> CaConfiguration {
    CaConfiguration {
        cluster_id: config.cluster_id.to_string(),
        provider: config.provider.to_string(),
        config: serde_json::from_str(&config.config_json).unwrap_or(serde_json::Value::Null),
        force_without_cross_signing: config.force_without_cross_signing,
        create_index: config.create_index,
        modify_index: config.modify_index,
    }
}

/// `GET /v1/connect/ca/configuration`'s answer: on a server from its store, on a client
/// agent from the `ConnectCA.ConfigurationGet` reply.
pub fn ca_configuration_answer(config: &CaConfiguration, headers: &[u8], reply: &mut Reply) {
    let body = Doc::Obj(vec![
        ("Provider".into(), Doc::Str(config.provider.clone())),
        ("Config".into(), Doc::Raw(config.config.clone())),
        ("State".into(), Doc::Null),
        (
            "ForceWithoutCrossSigning".into(),
            Doc::Bool(config.force_without_cross_signing),
        ),
        ("CreateIndex".into(), Doc::Int(config.create_index as i64)),
        ("ModifyIndex".into(), Doc::Int(config.modify_index as i64)),
    ]);
    send_doc(reply, headers, &body);
}

struct ConfigQuery;

impl Query for ConfigQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        ca_config_index(tables)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        let Some(config) = &tables.mesh.ca.config else {
            reply.error(&ApiError::Internal(CA_NOT_INITIALIZED.to_string()));
            return;
        };
        ca_configuration_answer(&ca_configuration_of(config), &headers, reply);
    }
}

/// A CA configuration to set, as a `PUT` body or a `CARequest` carries it.
pub struct CaConfigSet {
    pub provider: String,
    /// `Config` as written; `Null` when left out.
    pub config: serde_json::Value,
    pub force_without_cross_signing: bool,
}

impl CaConfigSet {
    /// The body of a `PUT /v1/connect/ca/configuration`.
    fn parse(body: &[u8]) -> Result<CaConfigSet, ApiError> {
        let value = parse_strict(body, &bodies::CA_CONFIGURATION)
            .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
        let obj = Obj::new(&value)
            .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
        let provider = obj
            .opt_string(&["provider"])
            .map_err(ApiError::bad_request)?
            .unwrap_or_default();
        Ok(CaConfigSet {
            provider,
            config: obj.get(&["config"]).cloned().unwrap_or_default(),
            force_without_cross_signing: obj.bool(&["forcewithoutcrosssigning"]).unwrap_or(false),
        })
    }

    /// The configuration as `ConnectCA.ConfigurationSet` carries it.
    pub fn to_wire(&self) -> CaConfiguration {
        CaConfiguration {
            provider: self.provider.clone(),
            config: self.config.clone(),
            force_without_cross_signing: self.force_without_cross_signing,
            ..CaConfiguration::default()
        }
    }

    /// A `ConnectCA.ConfigurationSet`'s configuration.
    pub fn of_wire(config: CaConfiguration) -> CaConfigSet {
        CaConfigSet {
            provider: config.provider,
            config: config.config,
            force_without_cross_signing: config.force_without_cross_signing,
        }
    }
}

/// The store command that sets `set` on the leader (which alone holds the active root's
/// key): the provider checked, the settings read over the defaults, and a new root made and
/// cross-signed when the key or the root's lifetime changes. Shared by the HTTP handler and
/// `ConnectCA.ConfigurationSet`.
pub fn ca_config_command(ctx: &Context, set: &CaConfigSet) -> Result<Command, ApiError> {
    if set.provider != ca::PROVIDER_CONSUL {
        return Err(ApiError::Internal(format!(
            "could not initialize provider: unknown CA provider {:?}",
            set.provider
        )));
    }
    let settings = match &set.config {
        serde_json::Value::Object(map) => CaSettings::from_map(map, &CaSettings::default()),
        serde_json::Value::Null => Ok(CaSettings::default()),
        _ => Err("Config must be an object".to_string()),
    }
    .map_err(|e| ApiError::Internal(format!("error parsing CA config: {e}")))?;
    let version = ctx.current_version();
    let state = &version.mesh.ca;
    let (Some(current), Some(active)) = (&state.config, state.active_root()) else {
        return Err(ApiError::Internal(CA_NOT_INITIALIZED.to_string()));
    };
    let current_settings = settings_of(current);
    // A secondary holds no root to rotate: its leader renews its intermediate with a key of
    // the new type when it next replicates the primary's roots (within a minute).
    let rotate = !is_secondary(ctx.config())
        && (settings.private_key_type != current_settings.private_key_type
            || settings.private_key_bits != current_settings.private_key_bits
            || settings.root_cert_ttl != current_settings.root_cert_ttl);
    let new_root = if rotate {
        let now_s = unix_s(super::context::now_unix_ns());
        Some(Box::new(
            rotated_root(current, active, &settings, now_s).map_err(ApiError::Internal)?,
        ))
    } else {
        None
    };
    // Consul keeps the `Config` map as it was written (`"72h"`, not `"72h0m0s"`); readers
    // take it over the defaults through `CaSettings::from_map`.
    let written = match &set.config {
        value @ serde_json::Value::Object(_) => value.to_string(),
        _ => "{}".to_string(),
    };
    let config = CaConfig {
        cluster_id: current.cluster_id.clone(),
        provider: ArcStr::from(ca::PROVIDER_CONSUL),
        config_json: ArcStr::from(written),
        force_without_cross_signing: set.force_without_cross_signing,
        create_index: 0,
        modify_index: 0,
    };
    Ok(Command::Ca(CaOp::SetConfig {
        config: Box::new(config),
        new_root,
        expected_active_root: active.id.to_string(),
    }))
}

/// The answer to a CA configuration write, from the store's result (a client agent's
/// `ConnectCA.ConfigurationSet` reply stands for `Bool`).
pub fn ca_config_set_answer(result: CommandResult, reply: &mut Reply) {
    match result {
        CommandResult::Bool(_) => reply.send(200, None, b"", b""),
        CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
        _ => reply.error(&ApiError::Internal(
            "unexpected result for a CA write".to_string(),
        )),
    }
}

/// `GET` and `PUT /v1/connect/ca/configuration`. A client agent sends them to a server as
/// `ConnectCA.ConfigurationGet` and `ConnectCA.ConfigurationSet`; that server checks that
/// Connect is enabled, as Consul's does.
pub fn configuration(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    configuration_in(ctx, request, reply, "")
}

/// The CA configuration here, or by `datacenter`'s typed call (not empty: named by `?dc=`).
fn configuration_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_connect_here(ctx, datacenter)?;
    if request.method == Method::Get {
        let options = client_config::options_in(ctx, request, datacenter)?;
        if !datacenter.is_empty() || ctx.reads_by_call(&options) {
            return Ok(client_connect::ca_configuration_get(
                ctx, request, options, datacenter,
            ));
        }
        return run_query(ctx, ConfigQuery, options, reply);
    }
    if datacenter.is_empty() {
        super::check_datacenter(ctx, &request.query)?;
    }
    let set = CaConfigSet::parse(request.body)?;
    if !datacenter.is_empty() || ctx.writes_by_call() {
        return Ok(client_connect::ca_configuration_set(
            ctx, request, &set, datacenter,
        ));
    }
    Ok(Outcome::Write(WriteOp {
        command: ca_config_command(ctx, &set)?,
        respond: Box::new(ca_config_set_answer),
    }))
}

/// Consul's default `Config` of the built-in CA, as it writes it (`structs.DefaultLeafCertTTL`
/// and its siblings are these strings).
const CA_CONFIG_DEFAULTS: [(&str, &str); 3] = [
    ("LeafCertTTL", "72h"),
    ("IntermediateCertTTL", "8760h"),
    ("RootCertTTL", "87600h"),
];

/// The snake-case keys of an agent's `connect.ca_config` Consul translates to the CA's
/// CamelCase ones.
const CA_CONFIG_KEYS: [(&str, &str); 9] = [
    ("leaf_cert_ttl", "LeafCertTTL"),
    ("intermediate_cert_ttl", "IntermediateCertTTL"),
    ("root_cert_ttl", "RootCertTTL"),
    ("private_key_type", "PrivateKeyType"),
    ("private_key_bits", "PrivateKeyBits"),
    ("private_key", "PrivateKey"),
    ("root_cert", "RootCert"),
    ("csr_max_per_second", "CSRMaxPerSecond"),
    ("csr_max_concurrent", "CSRMaxConcurrent"),
];

/// The first CA configuration's `Config`: Consul's defaults with the agent's
/// `connect.ca_config` over them, each value as it was written.
pub fn initial_ca_config(written: Option<&serde_json::Map<String, serde_json::Value>>) -> String {
    let mut map: serde_json::Map<String, serde_json::Value> = CA_CONFIG_DEFAULTS
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    for (key, value) in written.into_iter().flatten() {
        let name = CA_CONFIG_KEYS
            .iter()
            .find(|(snake, _)| snake == key)
            .map_or(key.as_str(), |(_, camel)| camel);
        map.insert(name.to_string(), value.clone());
    }
    serde_json::Value::Object(map).to_string()
}

/// The CA settings stored in `config` (defaults for what it lacks).
pub fn settings_of(config: &CaConfig) -> CaSettings {
    serde_json::from_str::<serde_json::Value>(&config.config_json)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .and_then(|m| CaSettings::from_map(&m, &CaSettings::default()).ok())
        .unwrap_or_default()
}

/// Whether this agent's datacenter is a secondary: `primary_datacenter` names another.
pub fn is_secondary(config: &crate::config::AgentConfig) -> bool {
    config.pending.primary_datacenter != config.datacenter
}

/// A new root under `config`'s cluster, cross-signed by `old`'s key.
pub fn rotated_root(
    config: &CaConfig,
    old: &CaRoot,
    settings: &CaSettings,
    now_unix_s: i64,
) -> Result<CaRoot, String> {
    let made = connect_ca::make_root(&connect_ca::RootSpec {
        cluster_id: config.cluster_id.to_string(),
        key_bits: settings.private_key_bits,
        ttl: settings.root_cert_ttl,
        now_unix_s,
    })?;
    let cross = connect_ca::cross_sign(&made, &old.root_cert_pem, &old.signing_key_pem)?;
    let mut root = ca_root(made, &config.trust_domain());
    root.intermediate_certs = vec![ArcStr::from(cross)];
    Ok(root)
}

/// The store's row for a root the leader made.
pub fn ca_root(made: connect_ca::MadeRoot, trust_domain: &str) -> CaRoot {
    CaRoot {
        id: ArcStr::from(made.id),
        name: ArcStr::from(made.name),
        serial_number: made.serial_number,
        signing_key_id: ArcStr::from(made.signing_key_id),
        external_trust_domain: ArcStr::from(trust_domain),
        not_before_unix_s: made.not_before_unix_s,
        not_after_unix_s: made.not_after_unix_s,
        root_cert_pem: ArcStr::from(made.cert_pem),
        intermediate_certs: Vec::new(),
        signing_key_pem: ArcStr::from(made.key_pem),
        active: true,
        rotated_out_at_ms: None,
        private_key_type: ArcStr::from("ec"),
        private_key_bits: made.key_bits,
        create_index: 0,
        modify_index: 0,
        signing_cert_pem: ArcStr::new(),
    }
}

/// Whether a SPIFFE trust domain is one this cluster's roots were made under.
pub fn trusted_domain(state: &CaState, trust_domain: &str) -> bool {
    state
        .trust_domain()
        .is_some_and(|ours| ours.eq_ignore_ascii_case(trust_domain))
        || state
            .roots
            .iter()
            .any(|r| r.external_trust_domain.eq_ignore_ascii_case(trust_domain))
}

/// The `Reason` Consul gives for a matched intention.
fn matched_reason(destination: &str, source: &intentions::SourceIntention) -> String {
    matched_reason_of(
        &source.name,
        destination,
        &source.legacy_id,
        i64::from(source.precedence),
        source.is_l7(),
        source.action,
    )
}

/// [`matched_reason`] of an intention's parts (a client agent's `Intention.Match` reply).
pub fn matched_reason_of(
    source: &str,
    destination: &str,
    legacy_id: &str,
    precedence: i64,
    l7: bool,
    action: Option<Action>,
) -> String {
    let kind = if l7 { "L7" } else { "L4" };
    let id = if legacy_id.is_empty() {
        String::new()
    } else {
        format!("ID: {legacy_id}, ")
    };
    let detail = match action {
        _ if l7 => "Permissions: L7".to_string(),
        Some(Action::Allow) => "Action: ALLOW".to_string(),
        Some(Action::Deny) | None => "Action: DENY".to_string(),
    };
    format!("Matched {kind} intention: {source} => {destination} ({id}Precedence: {precedence}, {detail})")
}

/// The service a client certificate's SPIFFE URI names, refused in Consul's words.
fn client_service(client_cert_uri: &str) -> Result<spiffe::ServiceId, ApiError> {
    spiffe::parse_service(client_cert_uri).map_err(|e| match e {
        SpiffeError::NotSpiffe => {
            ApiError::bad_request("ClientCertURI not a valid Connect identifier")
        }
        SpiffeError::NotService => {
            ApiError::bad_request("ClientCertURI not a valid Service identifier")
        }
    })
}

/// The reason a certificate of another trust domain is refused.
pub fn untrusted_reason(trust_domain: &str) -> String {
    format!("Client certificate trust domain {trust_domain:?} does not match this cluster's")
}

/// The answer to an authorization: `{"Authorized": …, "Reason": …}`.
pub fn authorize_answer(authorized: bool, reason: &str, reply: &mut Reply) {
    let mut body = Vec::with_capacity(96 + reason.len());
    let mut w = crate::consul::json::JsonWriter::new(&mut body, reply.pretty);
    w.begin_object();
    w.field_bool("Authorized", authorized);
    w.field_str("Reason", reason);
    w.end_object();
    w.finish();
    reply.json_bytes(200, b"", &body);
}

/// One authorization decision: `(authorized, reason)`. A pure function of the version, the
/// client's SPIFFE URI, the target and the default.
pub fn authorize_decision(
    tables: &Tables,
    target: &str,
    client_cert_uri: &str,
    default_allow: bool,
) -> Result<(bool, String), ApiError> {
    let id = client_service(client_cert_uri)?;
    if !trusted_domain(&tables.mesh.ca, &id.trust_domain) {
        return Ok((false, untrusted_reason(&id.trust_domain)));
    }
    Ok(match intentions::decide(tables, &id.service, target) {
        Decision::Matched {
            destination,
            source,
        } => (
            Decision::Matched {
                destination,
                source,
            }
            .allowed(default_allow),
            matched_reason(destination, source),
        ),
        Decision::Default => (
            default_allow,
            "Default behavior configured by ACLs".to_string(),
        ),
    })
}

/// `POST /v1/agent/connect/authorize`.
/// An authorize body in the casing every Consul client sends, decoded without building a
/// JSON tree (authorize runs once per new mesh connection). Any other key sends the body
/// down the checked path, which refuses what Consul refuses.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthorizeBody<'a> {
    #[serde(rename = "Target", borrow, default)]
    target: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "ClientCertURI", borrow, default)]
    client_cert_uri: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "ClientCertSerial", borrow, default)]
    _client_cert_serial: Option<std::borrow::Cow<'a, str>>,
}

/// `(Target, ClientCertURI)` of an authorize body: the fast path for Consul's casing, else
/// field names in any case, as Go's decoder matches them.
fn authorize_fields(body: &[u8]) -> Result<(String, String), ApiError> {
    if let Ok(fast) = serde_json::from_slice::<AuthorizeBody>(body) {
        if let (Some(target), Some(uri)) = (&fast.target, &fast.client_cert_uri) {
            return Ok((target.to_string(), uri.to_string()));
        }
    }
    let value = parse_strict(body, &bodies::CONNECT_AUTHORIZE)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let obj = Obj::new(&value)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let target = obj
        .opt_string(&["target"])
        .map_err(ApiError::bad_request)?
        .unwrap_or_default();
    let uri = obj
        .opt_string(&["clientcerturi"])
        .map_err(ApiError::bad_request)?
        .unwrap_or_default();
    Ok((target, uri))
}

/// `POST /v1/agent/connect/authorize`.
pub fn authorize(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    require_connect(ctx)?;
    let (target, uri) = authorize_fields(request.body)?;
    if target.is_empty() {
        return Err(ApiError::bad_request("Target service must be specified"));
    }
    if uri.is_empty() {
        return Err(ApiError::bad_request("Client cert URI must be specified"));
    }
    if ctx.is_client() {
        // A client agent keeps no store: it decides from the roots and the intentions its
        // server answers (`ConnectCA.Roots`, `Intention.Match`), as Consul's agent does.
        let id = client_service(&uri)?;
        return Ok(client_connect::authorize(
            ctx,
            request,
            target,
            id,
            default_allow(ctx),
        ));
    }
    let version = ctx.current_version();
    let (authorized, reason) = authorize_decision(&version, &target, &uri, default_allow(ctx))?;
    authorize_answer(authorized, &reason, reply);
    Ok(Outcome::Done)
}

/// The rule of `/v1/agent/connect/authorize`: [`check_authorize`].
pub const AUTHORIZE_ACL_RULE: super::authz::CustomRule = super::authz::CustomRule {
    name: "service:write on the body's Target",
    check: |_, request, authz| check_authorize(request, authz),
};

/// The ACL check of `POST /v1/agent/connect/authorize`: `service:write` on the target.
pub fn check_authorize(request: &Request, authz: &super::authz::Authz) -> Result<(), ApiError> {
    let target = authorize_fields(request.body)
        .map(|(target, _)| target)
        .unwrap_or_default();
    authz.require(authz.authorizer.service_write(&target))
}

/// The service a CSR (PEM) asks a leaf for: what `ConnectCA.Sign` checks `service:write` on.
pub fn csr_pem_service(csr: &str) -> Option<String> {
    let params = rcgen::CertificateSigningRequestParams::from_pem(csr).ok()?;
    params
        .params
        .subject_alt_names
        .iter()
        .find_map(|san| match san {
            rcgen::SanType::URI(uri) => spiffe::parse_service(uri.as_str())
                .ok()
                .map(|id| id.service),
            _ => None,
        })
}

/// A leaf signed by the active root, with the intermediates that chain it to every peer
/// trusting any of the roots.
pub struct IssuedLeaf {
    pub signed: connect_ca::SignedLeaf,
    /// The leaf followed by the active root's intermediates, PEM.
    pub chain_pem: String,
    pub root_id: String,
    /// The store index it was signed at (the leaf's `CreateIndex` and `ModifyIndex`).
    pub index: u64,
}

/// Signs `csr` with the active root of `tables` (Consul's `ConnectCA.Sign`).
pub fn sign_csr(
    tables: &Tables,
    datacenter: &str,
    csr: &str,
    now_unix_s: i64,
) -> Result<IssuedLeaf, ApiError> {
    let state = &tables.mesh.ca;
    let (Some(config), Some(root)) = (&state.config, state.active_root()) else {
        return Err(ApiError::Internal(
            "CA is uninitialized and unable to sign certificates yet".to_string(),
        ));
    };
    let settings = settings_of(config);
    let signed = connect_ca::sign_leaf(&connect_ca::LeafSpec {
        csr_pem: csr,
        ca_cert_pem: root.signer_cert_pem(),
        ca_key_pem: &root.signing_key_pem,
        trust_domain: &config.trust_domain(),
        datacenter,
        ttl: settings.leaf_cert_ttl,
        now_unix_s,
    })
    .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    let mut chain_pem = signed.cert_pem.trim_end().to_string();
    chain_pem.push('\n');
    for intermediate in &root.intermediate_certs {
        chain_pem.push_str(intermediate.trim_end());
        chain_pem.push('\n');
    }
    Ok(IssuedLeaf {
        signed,
        chain_pem,
        root_id: root.id.to_string(),
        index: tables.index,
    })
}

/// Consul's `IssuedCert` JSON of a signed leaf (no private key: the agent adds its own).
pub fn issued_doc(leaf: &IssuedLeaf, private_key_pem: Option<&str>) -> Doc {
    let mut fields = vec![
        (
            "SerialNumber".into(),
            Doc::Str(leaf.signed.serial_number.clone()),
        ),
        ("CertPEM".into(), Doc::Str(leaf.chain_pem.clone())),
    ];
    if let Some(key) = private_key_pem {
        fields.push(("PrivateKeyPEM".into(), Doc::Str(key.to_string())));
    }
    fields.extend([
        ("Service".into(), Doc::Str(leaf.signed.service.clone())),
        (
            "ServiceURI".into(),
            Doc::Str(leaf.signed.service_uri.clone()),
        ),
        (
            "ValidAfter".into(),
            Doc::Str(time_text(leaf.signed.valid_after_unix_s)),
        ),
        (
            "ValidBefore".into(),
            Doc::Str(time_text(leaf.signed.valid_before_unix_s)),
        ),
        ("CreateIndex".into(), Doc::Int(leaf.index as i64)),
        ("ModifyIndex".into(), Doc::Int(leaf.index as i64)),
    ]);
    Doc::Obj(fields)
}

/// Signs a secondary datacenter's intermediate CSR with the active root, on the primary's
/// leader: what Consul's `ConnectCA.SignIntermediate` answers (`api::rpc::connect_ca`,
/// after the token's `operator:write`). The PEM of the signed certificate.
pub fn sign_intermediate_pem(ctx: &Context, csr: &str) -> Result<String, ApiError> {
    require_connect(ctx)?;
    if is_secondary(ctx.config()) {
        return Err(ApiError::Internal(NOT_PRIMARY.to_string()));
    }
    debug_assert!(ctx.is_leader(), "the primary's leader signs intermediates");
    let version = ctx.current_version();
    let state = &version.mesh.ca;
    let (Some(config), Some(root)) = (&state.config, state.active_root()) else {
        return Err(ApiError::Internal(
            "CA is uninitialized and unable to sign certificates yet".to_string(),
        ));
    };
    connect_ca::sign_intermediate(&connect_ca::IntermediateSpec {
        csr_pem: csr,
        ca_cert_pem: root.signer_cert_pem(),
        ca_key_pem: &root.signing_key_pem,
        trust_domain: &config.trust_domain(),
        ttl: settings_of(config).intermediate_cert_ttl,
        now_unix_s: unix_s(super::context::now_unix_ns()),
    })
    .map_err(ApiError::Internal)
}
