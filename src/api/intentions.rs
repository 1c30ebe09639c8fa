//! `/v1/connect/intentions`: Consul's intentions API over `service-intentions` config
//! entries (Consul ≥ 1.9): list, legacy create/read/update/delete by ID, `exact`
//! read/upsert/delete by source and destination, `match` and `check`.
//!
//! Reads report the config entries table index, as Consul's do, and watch only what they
//! read: one destination's entry (`exact`, `check`), a destination's and the wildcard's
//! (`match?by=destination`), or every intentions entry (lists, by ID, by source).
//!
//! The default decision (`check` when nothing matches) follows the ACL default policy:
//! allow with ACLs off, as in Consul.

use super::{
    query_options, run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request, WriteOp,
};
use crate::consul::body::{parse_json, parse_strict};
use crate::consul::config_entry::doc::{self, Doc};
use crate::consul::config_entry::intention::{decode_legacy, legacy_doc, LegacyIntention};
use crate::shard::watch::WatchSet;
use crate::store::acl::authorizer::Authorizer;
use crate::store::mesh::config_entry::{self as entries, ConfigEntryOp, ConfigKind};
use crate::store::mesh::intentions::{self, IntentionOp, WILDCARD};
use crate::store::{Command, CommandResult, StoreVersion, Table, Tables};
use std::sync::Arc;

/// Most names one `match` request may ask about.
pub const MATCH_NAMES_MAX: usize = 64;

/// The rule of the intention routes: [`check_acl`].
pub const ACL_RULE: super::authz::CustomRule = super::authz::CustomRule {
    name: "intention: read or write on the destination",
    check: check_acl,
};

/// The ACL check of an intentions request, made before the handler runs: `intention:read`
/// on the destination to read one or match, `intention:write` to write, `service:read` on
/// the destination to `check`; lists and reads by ID are filtered by the handler.
pub fn check_acl(
    ctx: &Context,
    request: &Request,
    authz: &super::authz::Authz,
) -> Result<(), ApiError> {
    use crate::proto::http::Method;
    let a = &*authz.authorizer;
    let name_of = |param: &str| {
        request
            .query
            .get(param)
            .and_then(|raw| parse_name(raw, param).ok())
            .unwrap_or_default()
    };
    match (request.path, request.method) {
        ("/v1/connect/intentions", Method::Post) => {
            let destination = parse_json(request.body)
                .ok()
                .and_then(|v| decode_legacy(&v).ok())
                .map(|ixn| ixn.destination_name)
                .unwrap_or_default();
            authz.require(a.intention_write(&destination))
        }
        ("/v1/connect/intentions", _) => Ok(()),
        ("/v1/connect/intentions/exact", Method::Get) => {
            authz.require(a.intention_read(&name_of("destination")))
        }
        ("/v1/connect/intentions/exact", _) => {
            authz.require(a.intention_write(&name_of("destination")))
        }
        ("/v1/connect/intentions/check", _) => {
            authz.require(a.service_read(&name_of("destination")))
        }
        ("/v1/connect/intentions/match", _) => {
            for raw in request.query.get_all("name") {
                let name = parse_name(raw, "name").unwrap_or_default();
                authz.require(a.intention_read(&name))?;
            }
            Ok(())
        }
        (_, Method::Get) => Ok(()),
        _ => {
            let version = ctx.current_version();
            match intentions::by_legacy_id(&version, request.rest) {
                Some((entry, _)) => authz.require(a.intention_write(&entry.name)),
                None => Ok(()),
            }
        }
    }
}

/// Consul's refusal when Connect is off on the servers.
pub fn require_connect(ctx: &Context) -> Result<(), ApiError> {
    if ctx.config().connect.enabled {
        Ok(())
    } else {
        Err(ApiError::Internal(
            "Connect must be enabled in order to use this endpoint".to_string(),
        ))
    }
}

/// The default decision when no intention matches: the ACL default policy, allow with
/// ACLs off.
pub fn default_allow(ctx: &Context) -> bool {
    !ctx.acl_enabled()
        || ctx.config().acl.default_policy == crate::store::acl::authorizer::DefaultPolicy::Allow
}

/// A service name given as `name` or `default/name` (Consul's community edition knows one
/// namespace).
fn parse_name(input: &str, what: &str) -> Result<String, ApiError> {
    let invalid = |why: &str| ApiError::Internal(format!("{what} {input:?} is invalid: {why}"));
    if input.starts_with("peer:") {
        return Err(invalid("cannot specify a peer here"));
    }
    match input.split('/').collect::<Vec<_>>()[..] {
        [name] => Ok(name.to_string()),
        [ns, name] if ns == "default" || ns.is_empty() => Ok(name.to_string()),
        [_, _] => Err(invalid("Namespaces are a Consul Enterprise feature")),
        _ => Err(invalid("Partitions are a Consul Enterprise feature")),
    }
}

fn required<'r>(request: &'r Request, name: &'r str) -> Result<&'r str, ApiError> {
    let mut values = request.query.get_all(name);
    match (values.next(), values.next()) {
        (Some(value), None) if !value.is_empty() => Ok(value),
        _ => Err(ApiError::Internal(format!(
            "required query parameter '{name}' not set"
        ))),
    }
}

fn entries_prefix() -> Arc<str> {
    Arc::from(entries::kind_prefix(ConfigKind::ServiceIntentions).as_str())
}

fn entry_key(destination: &str) -> Arc<str> {
    Arc::from(entries::entry_key(ConfigKind::ServiceIntentions, destination).as_str())
}

fn write_answer(result: CommandResult, reply: &mut Reply, ok: impl FnOnce(&mut Reply)) {
    match result {
        CommandResult::Bool(_) => ok(reply),
        CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
        _ => reply.error(&ApiError::Internal(
            "unexpected result for an intention write".to_string(),
        )),
    }
}

fn intention_write(command: IntentionOp, ok: impl FnOnce(&mut Reply) + 'static) -> Outcome {
    Outcome::Write(WriteOp {
        command: Command::ConfigEntry(ConfigEntryOp::Intention(command)),
        respond: Box::new(move |result, reply: &mut Reply| write_answer(result, reply, ok)),
    })
}

/// The request's token, with ACLs on.
fn token(request: &Request) -> Option<Arc<Authorizer>> {
    request.acl.get().map(|a| a.authorizer.clone())
}

fn decode_body(request: &Request) -> Result<LegacyIntention, ApiError> {
    let value = parse_strict(request.body, &crate::consul::bodies::INTENTION)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    decode_legacy(&value).map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))
}

/// `GET` and `POST /v1/connect/intentions`.
pub fn intentions(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_connect(ctx)?;
    if request.method == crate::proto::http::Method::Post {
        return create(ctx, request);
    }
    let options = query_options(ctx, &request.query)?;
    let filter = match request.query.get("filter") {
        Some(text) if !text.is_empty() => Some(
            crate::consul::filter::Filter::parse(text, crate::consul::filter::INTENTION)
                .map_err(ApiError::bad_request)?
                .ok_or_else(|| ApiError::bad_request("empty filter"))?,
        ),
        _ => None,
    };
    run_query(
        ctx,
        ListQuery {
            rows: super::authz::RowFilter::of(request),
            filter,
        },
        options,
        reply,
    )
}

/// `POST /v1/connect/intentions`: a legacy intention with a fresh ID.
fn create(ctx: &Context, request: &Request) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    let ixn = decode_body(request)?;
    if !ixn.source_peer.is_empty() {
        return Err(ApiError::Internal(
            "SourcePeer field is not supported on this endpoint. Use config entries instead"
                .to_string(),
        ));
    }
    if !ixn.id.is_empty() {
        return Err(ApiError::Internal(
            "ID must be empty when creating a new intention".to_string(),
        ));
    }
    ixn.validate(true).map_err(ApiError::Internal)?;
    let version = ctx.current_version();
    let id = loop {
        let candidate = uuid::Uuid::new_v4().to_string();
        if intentions::by_legacy_id(&version, &candidate).is_none() {
            break candidate;
        }
    };
    let source = ixn.to_source(&id, Some(super::context::now_unix_ns()));
    let answer = serde_json::json!({ "ID": id });
    Ok(intention_write(
        IntentionOp::LegacyCreate {
            destination: ixn.destination_name.clone(),
            source,
        },
        move |reply| reply.json(200, b"", &answer),
    ))
}

/// `GET`, `PUT` and `DELETE /v1/connect/intentions/exact?source=…&destination=…`.
pub fn exact(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    require_connect(ctx)?;
    let source = parse_name(required(request, "source")?, "source")?;
    let destination = parse_name(required(request, "destination")?, "destination")?;
    match request.method {
        crate::proto::http::Method::Get => {
            let options = query_options(ctx, &request.query)?;
            let key = entry_key(&destination);
            run_query(
                ctx,
                ExactQuery {
                    source,
                    destination,
                    key,
                },
                options,
                reply,
            )
        }
        crate::proto::http::Method::Put => {
            super::check_datacenter(ctx, &request.query)?;
            let mut ixn = decode_body(request)?;
            ixn.id.clear();
            ixn.source_name = source;
            ixn.destination_name = destination;
            if !ixn.meta.is_empty() {
                let version = ctx.current_version();
                let previous = entries::get(
                    &version,
                    ConfigKind::ServiceIntentions,
                    &ixn.destination_name,
                )
                .and_then(|e| e.intentions().map(|b| b.meta.clone()));
                let mut given = ixn.meta.clone();
                given.sort();
                let previous = previous.map(|mut meta| {
                    meta.sort();
                    meta
                });
                match previous {
                    Some(meta) if meta == given => ixn.meta.clear(),
                    Some(_) => {
                        return Err(ApiError::Internal(
                            "Meta must not be specified, or should be unchanged during an update."
                                .to_string(),
                        ))
                    }
                    None => {
                        return Err(ApiError::Internal("Meta must not be specified".to_string()))
                    }
                }
            }
            ixn.validate(false).map_err(ApiError::Internal)?;
            let source = ixn.to_source("", None);
            Ok(intention_write(
                IntentionOp::Upsert {
                    destination: ixn.destination_name.clone(),
                    source,
                },
                |reply| reply.json_bool(true),
            ))
        }
        _ => {
            super::check_datacenter(ctx, &request.query)?;
            // By-name deletions are idempotent: nothing to delete answers without a write.
            if ctx.is_leader()
                && intentions::exact(&ctx.current_version(), &source, &destination).is_none()
            {
                reply.json_bool(true);
                return Ok(Outcome::Done);
            }
            Ok(intention_write(
                IntentionOp::DeleteExact {
                    destination,
                    source,
                },
                |reply| reply.json_bool(true),
            ))
        }
    }
}

/// `GET /v1/connect/intentions/match?by=source|destination&name=…`.
pub fn match_intentions(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    require_connect(ctx)?;
    let options = query_options(ctx, &request.query)?;
    let by_destination = match request.query.get_all("by").collect::<Vec<_>>()[..] {
        ["source"] => false,
        ["destination"] => true,
        [_] => {
            return Err(ApiError::Internal(
                "'by' parameter must be one of 'source' or 'destination'".to_string(),
            ))
        }
        _ => {
            return Err(ApiError::Internal(
                "required query parameter 'by' not set".to_string(),
            ))
        }
    };
    let given: Vec<&str> = request.query.get_all("name").collect();
    if given.is_empty() {
        return Err(ApiError::Internal(
            "required query parameter 'name' not set".to_string(),
        ));
    }
    if given.len() > MATCH_NAMES_MAX {
        return Err(ApiError::bad_request(format!(
            "at most {MATCH_NAMES_MAX} names may be matched at once"
        )));
    }
    let mut names = Vec::with_capacity(given.len());
    for raw in given {
        let name = parse_name(raw, "name")?;
        names.push((raw.to_string(), name));
    }
    run_query(
        ctx,
        MatchQuery {
            by_destination,
            names,
        },
        options,
        reply,
    )
}

/// `GET /v1/connect/intentions/check?source=…&destination=…`.
pub fn check(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    require_connect(ctx)?;
    let options = query_options(ctx, &request.query)?;
    let source_type = request.query.get("source-type").unwrap_or("consul");
    let source_raw = required(request, "source")?;
    let source = if source_type == "consul" {
        parse_name(source_raw, "source")?
    } else {
        source_raw.to_string()
    };
    let destination = parse_name(required(request, "destination")?, "destination")?;
    let query = CheckQuery {
        keys: [entry_key(&destination), entry_key(WILDCARD)],
        source,
        destination,
        default_allow: default_allow(ctx),
    };
    run_query(ctx, query, options, reply)
}

/// `GET`, `PUT` and `DELETE /v1/connect/intentions/<id>`: the legacy API by ID.
pub fn by_id(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    require_connect(ctx)?;
    let id = request.rest.to_string();
    match request.method {
        crate::proto::http::Method::Get => {
            let options = query_options(ctx, &request.query)?;
            run_query(
                ctx,
                IdQuery {
                    id,
                    acl: token(request),
                },
                options,
                reply,
            )
        }
        crate::proto::http::Method::Put => {
            super::check_datacenter(ctx, &request.query)?;
            let ixn = decode_body(request)?;
            let version = ctx.current_version();
            let Some((entry, _)) = intentions::by_legacy_id(&version, &id) else {
                return Err(ApiError::Internal(format!(
                    "Cannot modify non-existent intention: '{id}'"
                )));
            };
            if !entry.name.eq_ignore_ascii_case(&ixn.destination_name) {
                return Err(ApiError::Internal(
                    "Cannot modify Destination partition/namespace/name for an intention once it exists."
                        .to_string(),
                ));
            }
            ixn.validate(true).map_err(ApiError::Internal)?;
            let source = ixn.to_source(&id, Some(super::context::now_unix_ns()));
            let answer = serde_json::json!({ "ID": id });
            Ok(intention_write(
                IntentionOp::LegacyUpdate {
                    id: id.clone(),
                    destination: ixn.destination_name.clone(),
                    source,
                },
                move |reply| reply.json(200, b"", &answer),
            ))
        }
        _ => {
            super::check_datacenter(ctx, &request.query)?;
            let version = ctx.current_version();
            if intentions::by_legacy_id(&version, &id).is_none() {
                return Err(ApiError::Internal(format!(
                    "Cannot delete non-existent intention: '{id}'"
                )));
            }
            Ok(intention_write(IntentionOp::LegacyDelete { id }, |reply| {
                reply.json_bool(true)
            }))
        }
    }
}

fn send_doc(reply: &mut Reply, meta: QueryMeta, extra_headers: &[u8], body: &Doc) {
    let mut headers = Vec::with_capacity(200);
    meta.write_headers(&mut headers);
    headers.extend_from_slice(extra_headers);
    let compact = body.to_json();
    if reply.pretty {
        let mut out = Vec::with_capacity(compact.len() * 2);
        doc::indent(compact.as_bytes(), &mut out);
        reply.json_bytes(200, &headers, &out);
    } else {
        reply.json_bytes(200, &headers, compact.as_bytes());
    }
}

fn legacy(entry: &entries::ConfigEntry, source: &intentions::SourceIntention) -> Doc {
    let meta = entry
        .intentions()
        .map(|b| b.meta.as_slice())
        .unwrap_or_default();
    legacy_doc(
        &entry.name,
        meta,
        source,
        entry.create_index,
        entry.modify_index,
    )
}

fn not_found(reply: &mut Reply, meta: QueryMeta) {
    let mut headers = Vec::with_capacity(160);
    meta.write_headers(&mut headers);
    reply.send(
        404,
        Some("text/plain; charset=utf-8"),
        &headers,
        b"Intention not found",
    );
}

struct ListQuery {
    rows: super::authz::RowFilter,
    filter: Option<crate::consul::filter::Filter>,
}

impl Query for ListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            entries::entries_index(tables),
            WatchSet::new().prefix(Table::ConfigEntries, entries_prefix()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut list = Vec::new();
        let mut hidden = false;
        for (entry, source) in intentions::all(tables) {
            let doc = legacy(entry, source);
            if let Some(filter) = &self.filter {
                let value: serde_json::Value =
                    serde_json::from_str(&doc.to_json()).unwrap_or_default();
                if !filter.matches(&value) {
                    continue;
                }
            }
            if !self.rows.intention(&entry.name) {
                hidden = true;
                continue;
            }
            list.push(doc);
        }
        let mut extra = Vec::new();
        self.rows.write_header(hidden, &mut extra);
        send_doc(reply, meta, &extra, &Doc::List(list));
    }
}

struct ExactQuery {
    source: String,
    destination: String,
    key: Arc<str>,
}

impl Query for ExactQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            entries::entries_index(tables),
            WatchSet::new().key(Table::ConfigEntries, self.key.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        match intentions::exact(tables, &self.source, &self.destination) {
            Some((entry, source)) => send_doc(reply, meta, b"", &legacy(entry, source)),
            None => not_found(reply, meta),
        }
    }
}

struct IdQuery {
    id: String,
    acl: Option<Arc<Authorizer>>,
}

impl Query for IdQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            entries::entries_index(tables),
            WatchSet::new().prefix(Table::ConfigEntries, entries_prefix()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        match intentions::by_legacy_id(tables, &self.id) {
            Some((entry, _))
                if self
                    .acl
                    .as_ref()
                    .is_some_and(|a| a.intention_read(&entry.name).is_err()) =>
            {
                let denial = self
                    .acl
                    .as_ref()
                    .and_then(|a| a.intention_read(&entry.name).err());
                let text = denial.map(|d| d.message(None)).unwrap_or_default();
                reply.send(403, Some("text/plain; charset=utf-8"), b"", text.as_bytes());
            }
            Some((entry, source)) => send_doc(reply, meta, b"", &legacy(entry, source)),
            None => not_found(reply, meta),
        }
    }
}

struct MatchQuery {
    by_destination: bool,
    /// (as given, as parsed)
    names: Vec<(String, String)>,
}

impl Query for MatchQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        let mut watch = WatchSet::new();
        if self.by_destination {
            for (_, name) in &self.names {
                watch = watch.key(Table::ConfigEntries, entry_key(name));
            }
            watch = watch.key(Table::ConfigEntries, entry_key(WILDCARD));
        } else {
            watch = watch.prefix(Table::ConfigEntries, entries_prefix());
        }
        (entries::entries_index(tables), watch)
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut pairs: Vec<(String, Doc)> = Vec::with_capacity(self.names.len());
        for (given, name) in &self.names {
            let found = intentions::matches(tables, name, self.by_destination)
                .into_iter()
                .map(|(entry, source)| legacy(entry, source))
                .collect();
            pairs.retain(|(k, _)| k != given);
            pairs.push((given.clone(), Doc::List(found)));
        }
        // Go writes a map's keys sorted.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        send_doc(reply, meta, b"", &Doc::Obj(pairs));
    }
}

struct CheckQuery {
    keys: [Arc<str>; 2],
    source: String,
    destination: String,
    default_allow: bool,
}

impl Query for CheckQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            entries::entries_index(tables),
            WatchSet::new()
                .key(Table::ConfigEntries, self.keys[0].clone())
                .key(Table::ConfigEntries, self.keys[1].clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let allowed =
            intentions::decide(tables, &self.source, &self.destination).allowed(self.default_allow);
        send_doc(
            reply,
            meta,
            b"",
            &Doc::Obj(vec![("Allowed".to_string(), Doc::Bool(allowed))]),
        );
    }
}
