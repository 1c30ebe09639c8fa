//! `/v1/config`: config entries — `PUT /v1/config` (with `?cas`), `GET /v1/config/<kind>`,
//! `GET` and `DELETE /v1/config/<kind>/<name>` (with `?cas`), as Consul's
//! `agent/config_endpoint.go` serves them.
//!
//! Reads report the config entries table index, as Consul does, and block precisely: one
//! entry on its key, a kind's list on the kind's prefix. With ACLs on, a single entry needs
//! the read permission of its kind ([`config_entry_read`]), a list is filtered entry by entry, and a
//! write needs [`can_write`] (Consul's `CanRead`/`CanWrite` of each kind).
//!
//! A client agent holds no entries: its reads become `ConfigEntry.Get`, `.List` and
//! `.ListAll`, its writes `ConfigEntry.Apply` and `.Delete`, its discovery chains
//! `DiscoveryChain.Get` (`api::rpc::client_config`),
//! answered with this file's [`entry_answer`] and [`list_answer`]; a server's typed
//! endpoints (`api::rpc::config_entry`) share its reads and checks.

use super::authz::{config_entry_read, Authz, CustomRule};
use super::rpc::client_config;
use super::{run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request, WriteOp};
use crate::consul::config_entry::{self, EntryError};
use crate::proto::http::Method;
use crate::shard::watch::WatchSet;
use crate::store::acl::authorizer::{Authorizer, Check};
use crate::store::mesh::config_entry::{self as entries, ConfigEntry, ConfigEntryOp, ConfigKind};
use crate::store::{Command, CommandResult, StoreVersion, Table, Tables};
use std::sync::Arc;

/// Consul's `CanWrite` of an entry of `kind` named `name`; discovery-chain entries also
/// need read on every service they send traffic to.
pub fn can_write<'a>(
    a: &Authorizer,
    kind: ConfigKind,
    name: &'a str,
    related: &'a [String],
) -> Check<'a> {
    match kind {
        ConfigKind::ProxyDefaults
        | ConfigKind::Mesh
        | ConfigKind::IngressGateway
        | ConfigKind::TerminatingGateway
        | ConfigKind::ExportedServices => a.mesh_write(),
        ConfigKind::ServiceIntentions => a.intention_write(name),
        ConfigKind::ServiceDefaults => a.service_write(name),
        ConfigKind::ServiceRouter | ConfigKind::ServiceSplitter | ConfigKind::ServiceResolver => {
            a.service_write(name)?;
            for service in related {
                a.service_read(service)?;
            }
            Ok(())
        }
    }
}

/// The services a discovery-chain entry's body sends traffic to (Consul's
/// `GetRelatedServices`), other than the entry's own.
pub fn related_services(body: &[u8]) -> Vec<String> {
    match config_entry::decode_body(body) {
        Ok(entry) => related_services_of(&entry),
        Err(_) => Vec::new(),
    }
}

/// [`related_services`] of a decoded entry (what `ConfigEntry.Apply` checks).
pub fn related_services_of(entry: &ConfigEntry) -> Vec<String> {
    let fields = config_entry::fields_of(entry);
    let mut related: Vec<String> = Vec::new();
    let mut add = |value: Option<&serde_json::Value>| {
        if let Some(name) = value.and_then(|v| v.as_str()) {
            if !name.is_empty() && name != entry.name.as_str() && !related.iter().any(|r| r == name)
            {
                related.push(name.to_string());
            }
        }
    };
    let list = |name: &str| {
        fields
            .get(name)
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default()
    };
    for split in list("Splits") {
        add(split.get("Service"));
    }
    for route in list("Routes") {
        add(route.get("Destination").and_then(|d| d.get("Service")));
    }
    add(fields.get("Redirect").and_then(|r| r.get("Service")));
    if let Some(failover) = fields.get("Failover").and_then(|f| f.as_object()) {
        for target in failover.values() {
            add(target.get("Service"));
        }
    }
    related
}

/// The rule of the `/v1/config` routes: [`check_acl`].
pub const ACL_RULE: CustomRule = CustomRule {
    name: "config entry: its kind's read or write rule",
    check: |_, request, authz| check_acl(request, authz),
};

/// The ACL check of a `/v1/config` request, made before the handler runs.
pub fn check_acl(request: &Request, authz: &Authz) -> Result<(), ApiError> {
    let a = &*authz.authorizer;
    match request.method {
        Method::Put => {
            // A body that does not decode is refused by the handler with Consul's message.
            let Some((kind, name)) = config_entry::target_of(request.body) else {
                return Ok(());
            };
            let related = related_services(request.body);
            authz.require(can_write(a, kind, &name, &related))
        }
        Method::Delete => {
            let Some((kind, name)) = kind_and_name(request.rest) else {
                return Ok(());
            };
            let Some(kind) = ConfigKind::parse(kind) else {
                return Ok(());
            };
            authz.require(can_write(a, kind, name, &[]))
        }
        _ => {
            // A list is filtered row by row.
            let Some((kind, name)) = kind_and_name(request.rest) else {
                return Ok(());
            };
            let Some(kind) = ConfigKind::parse(kind) else {
                return Ok(());
            };
            authz.require(config_entry_read(a, kind, name))
        }
    }
}

/// `<kind>/<name>` split at its first `/` (a name may hold more); `None` for a kind alone.
fn kind_and_name(rest: &str) -> Option<(&str, &str)> {
    rest.split_once('/')
}

fn answer_write(result: CommandResult, reply: &mut Reply, as_bool: bool) {
    match result {
        CommandResult::Bool(done) if as_bool => reply.json_bool(done),
        CommandResult::Bool(_) => reply.json(200, b"", &serde_json::json!({})),
        CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
        _ => reply.error(&ApiError::Internal(
            "unexpected result for a config entry write".to_string(),
        )),
    }
}

fn cas_param(request: &Request) -> Result<Option<u64>, ApiError> {
    match request.query.get("cas") {
        None | Some("") => Ok(None),
        Some(text) => text
            .parse::<u64>()
            .map(Some)
            .map_err(|e| ApiError::Internal(format!("strconv.ParseUint: parsing {text:?}: {e}"))),
    }
}

/// `PUT /v1/config`.
pub fn apply(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    apply_op(request)
}

/// The write of a `PUT /v1/config` body, decoded and checked as the handler does (the
/// datacenter aside: [`client_config::across_datacenters`] sends it to another one).
pub fn apply_op(request: &Request) -> Result<Outcome, ApiError> {
    let entry = config_entry::decode_body(request.body).map_err(|e| match e {
        EntryError::Decode(m) => ApiError::bad_request(format!("Request decoding failed: {m}")),
        EntryError::Invalid(m) => ApiError::Internal(m),
    })?;
    let cas = cas_param(request)?;
    Ok(Outcome::Write(WriteOp {
        command: Command::ConfigEntry(ConfigEntryOp::Set {
            entry: Box::new(entry),
            cas,
        }),
        respond: Box::new(|result, reply: &mut Reply| answer_write(result, reply, true)),
    }))
}

/// `GET` and `DELETE /v1/config/<kind>[/<name>]`.
pub fn handle(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    match request.method {
        Method::Delete => {
            super::check_datacenter(ctx, &request.query)?;
            delete_op(request)
        }
        _ => get(ctx, request, reply, ""),
    }
}

/// A `GET /v1/config/<kind>[/<name>]` naming another datacenter (`?dc=`): parsed as the
/// handler parses it, then that datacenter's typed call.
pub fn get_elsewhere(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    super::run_for_datacenter(ctx, request, datacenter, get)
}

/// The write of a `DELETE /v1/config/<kind>/<name>`, checked as the handler does (the
/// datacenter aside).
pub fn delete_op(request: &Request) -> Result<Outcome, ApiError> {
    let Some((kind, name)) = kind_and_name(request.rest) else {
        return Err(ApiError::NotFound(
            "Must provide both a kind and name to delete".to_string(),
        ));
    };
    let kind = ConfigKind::parse(kind)
        .ok_or_else(|| ApiError::bad_request(format!("invalid config entry kind: {kind}")))?;
    let name = delete_name(kind, name).map_err(ApiError::Internal)?;
    let cas = cas_param(request)?;
    Ok(Outcome::Write(WriteOp {
        command: Command::ConfigEntry(ConfigEntryOp::Delete { kind, name, cas }),
        respond: Box::new(move |result, reply: &mut Reply| {
            answer_write(result, reply, cas.is_some())
        }),
    }))
}

/// The name a delete of `kind` acts on: a `proxy-defaults` entry is only ever `global`.
pub fn delete_name(kind: ConfigKind, name: &str) -> Result<String, String> {
    match kind {
        ConfigKind::ProxyDefaults if name != "global" => Err(format!(
            "invalid name ({name:?}), only \"global\" is supported"
        )),
        _ => Ok(name.to_string()),
    }
}

/// A read of entries: here, by this datacenter's typed call, or by `datacenter`'s (not
/// empty: another one, named by `?dc=`).
fn get(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = client_config::options_in(ctx, request, datacenter)?;
    let by_call = !datacenter.is_empty() || ctx.reads_by_call(&options);
    match kind_and_name(request.rest) {
        Some((kind_text, name)) => {
            let kind = ConfigKind::parse(kind_text).ok_or_else(|| {
                ApiError::Internal(format!("invalid config entry kind: {kind_text}"))
            })?;
            if by_call {
                return Ok(client_config::get(
                    ctx, request, kind, kind_text, name, options, datacenter,
                ));
            }
            let query = EntryQuery {
                kind,
                kind_text: kind_text.to_string(),
                name: name.to_string(),
                key: Arc::from(entries::entry_key(kind, name).as_str()),
            };
            run_query(ctx, query, options, reply)
        }
        None => {
            let kind = match request.rest {
                "" => None,
                text => Some(ConfigKind::parse(text).ok_or_else(|| {
                    ApiError::Internal(format!("invalid config entry kind: {text}"))
                })?),
            };
            if by_call {
                return Ok(client_config::list(ctx, request, kind, options, datacenter));
            }
            run_query(
                ctx,
                ListQuery {
                    kind,
                    rows: super::authz::RowFilter::of(request),
                },
                options,
                reply,
            )
        }
    }
}

struct EntryQuery {
    kind: ConfigKind,
    kind_text: String,
    name: String,
    key: Arc<str>,
}

impl Query for EntryQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        entry_read(tables, &self.key)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        let entry = entries::get(tables, self.kind, &self.name);
        entry_answer(
            entry.map(|e| &**e),
            &self.kind_text,
            &self.name,
            &headers,
            reply,
        );
    }
}

/// What a read of one entry depends on: the table's index, the entry's key
/// (`entries::entry_key`).
pub fn entry_read(tables: &Tables, key: &Arc<str>) -> (u64, WatchSet) {
    (
        entries::entries_index(tables),
        WatchSet::new().key(Table::ConfigEntries, key.clone()),
    )
}

/// The answer to a read of one entry (`kind_text` as the request spelled the kind): the
/// entry, or 404 in Consul's words. A client agent answers the typed reply with it.
pub fn entry_answer(
    entry: Option<&ConfigEntry>,
    kind_text: &str,
    name: &str,
    headers: &[u8],
    reply: &mut Reply,
) {
    let Some(entry) = entry else {
        let reason = format!("Config entry not found for {kind_text:?} / {name:?}");
        reply.send(
            404,
            Some("text/plain; charset=utf-8"),
            headers,
            reason.as_bytes(),
        );
        return;
    };
    let mut body = Vec::with_capacity(512);
    config_entry::render(entry, reply.pretty, &mut body);
    reply.json_bytes(200, headers, &body);
}

struct ListQuery {
    /// `None`: every kind.
    kind: Option<ConfigKind>,
    rows: super::authz::RowFilter,
}

impl Query for ListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        list_read(tables, self.kind)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let rows: Vec<&Arc<ConfigEntry>> = match self.kind {
            Some(kind) => entries::list(tables, kind).collect(),
            None => entries::all(tables).collect(),
        };
        let total = rows.len();
        let visible: Vec<&ConfigEntry> = rows
            .into_iter()
            .filter(|e| self.rows.config_entry(e.kind, &e.name))
            .map(|e| &**e)
            .collect();
        let mut headers = Vec::with_capacity(200);
        meta.write_headers(&mut headers);
        self.rows.write_header(visible.len() < total, &mut headers);
        list_answer(&visible, &headers, reply);
    }
}

/// What a list of `kind`'s entries (`None`: every kind) depends on.
pub fn list_read(tables: &Tables, kind: Option<ConfigKind>) -> (u64, WatchSet) {
    let watch = match kind {
        Some(kind) => WatchSet::new().prefix(
            Table::ConfigEntries,
            Arc::<str>::from(entries::kind_prefix(kind).as_str()),
        ),
        None => WatchSet::new().table(Table::ConfigEntries),
    };
    (entries::entries_index(tables), watch)
}

/// The answer to a list of entries, the token's filtering done.
pub fn list_answer(visible: &[&ConfigEntry], headers: &[u8], reply: &mut Reply) {
    let mut body = Vec::with_capacity(256 * (visible.len() + 1));
    config_entry::render_list(visible.iter().copied(), reply.pretty, &mut body);
    reply.json_bytes(200, headers, &body);
}

/// `GET` and `POST /v1/discovery-chain/<service>` (POST carries Consul's overrides).
pub fn discovery_chain(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    discovery_chain_in(ctx, request, reply, "")
}

/// A discovery chain naming another datacenter (`?dc=`): parsed as the handler parses it,
/// then `DiscoveryChain.Get` naming that datacenter, whose servers compile it (in their
/// own datacenter unless `?compile-dc` says otherwise, as Consul's do).
pub fn discovery_chain_elsewhere(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    super::run_for_datacenter(ctx, request, datacenter, discovery_chain_in)
}

fn discovery_chain_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    call_datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = client_config::options_in(ctx, request, call_datacenter)?;
    let service = request.rest.to_string();
    if service.is_empty() {
        return Err(ApiError::bad_request("Missing chain name"));
    }
    let datacenter = match request.query.get("compile-dc") {
        Some(dc) if !dc.is_empty() => dc.to_string(),
        // The servers of the datacenter named compile it in theirs.
        _ if !call_datacenter.is_empty() => call_datacenter.to_string(),
        _ => ctx.config().datacenter.clone(),
    };
    let mut overrides = crate::consul::discovery_chain::Overrides::default();
    if request.method == Method::Post && !request.body.iter().all(u8::is_ascii_whitespace) {
        let value = crate::consul::body::parse_strict(
            request.body,
            &crate::consul::bodies::DISCOVERY_CHAIN_OVERRIDES,
        )
        .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?;
        let obj = crate::consul::body::Obj::new(&value)
            .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?;
        if let Some(text) = obj
            .opt_string(&["overrideconnecttimeout"])
            .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?
            .filter(|t| !t.is_empty())
        {
            let ns = crate::proto::duration::parse_go_duration_nanos(&text)
                .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?;
            overrides.connect_timeout_ns = Some(ns);
        }
        overrides.protocol = obj
            .opt_string(&["overrideprotocol"])
            .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?
            .filter(|p| !p.is_empty())
            .map(|p| p.to_ascii_lowercase());
        if let Some(gateway) = obj
            .obj(&["overridemeshgateway"])
            .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?
        {
            let mode = gateway
                .opt_string(&["mode"])
                .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?
                .unwrap_or_default();
            overrides.mesh_gateway = crate::consul::discovery_chain::MeshGatewayMode::parse(&mode)
                .map_err(|e| ApiError::bad_request(format!("Request decoding failed: {e}")))?;
        }
    }
    if !call_datacenter.is_empty() || super::read_by_call(ctx, request)? {
        return Ok(client_config::discovery_chain(
            ctx,
            request,
            &service,
            &datacenter,
            &overrides,
            options,
            call_datacenter,
        ));
    }
    run_query(
        ctx,
        ChainQuery {
            service,
            datacenter,
            use_in_datacenter: ctx.config().datacenter.clone(),
            overrides,
        },
        options,
        reply,
    )
}

/// A service's compiled discovery chain (`DiscoveryChain.Get` on a server reads it too).
pub struct ChainQuery {
    pub service: String,
    pub datacenter: String,
    pub use_in_datacenter: String,
    pub overrides: crate::consul::discovery_chain::Overrides,
}

impl ChainQuery {
    /// The `{"Chain": …}` answer, or the compiler's refusal.
    pub fn compiled(
        &self,
        tables: &Tables,
    ) -> Result<crate::consul::config_entry::doc::Doc, String> {
        crate::consul::discovery_chain::compile(
            tables,
            &self.service,
            &self.datacenter,
            &self.use_in_datacenter,
            self.overrides.clone(),
        )
    }
}

/// Answers a compiled chain's `{"Chain": …}` document with `headers`, in the request's
/// layout. A client agent answers `DiscoveryChain.Get`'s reply with it.
pub fn chain_answer(
    doc: &crate::consul::config_entry::doc::Doc,
    headers: &[u8],
    reply: &mut Reply,
) {
    let compact = doc.to_json();
    let mut body = Vec::with_capacity(compact.len() * 2);
    if reply.pretty {
        crate::consul::config_entry::doc::indent(compact.as_bytes(), &mut body);
    } else {
        body.extend_from_slice(compact.as_bytes());
    }
    reply.json_bytes(200, headers, &body);
}

impl Query for ChainQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        // A chain reads entries of several kinds and services: any entry may change it.
        (
            entries::entries_index(tables),
            WatchSet::new().table(Table::ConfigEntries),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        match self.compiled(tables) {
            Ok(doc) => chain_answer(&doc, &headers, reply),
            Err(reason) => reply.send(
                500,
                Some("text/plain; charset=utf-8"),
                &headers,
                reason.as_bytes(),
            ),
        }
    }
}
