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
//!
//! A client agent holds no entries: each route becomes Consul's typed call
//! (`Intention.Apply`, `.Get`, `.List`, `.Match`, `.Check`; `api::rpc::client_intention`)
//! once the request is decoded, and the reply is rendered with this file's renderers. The
//! server's endpoints (`api::rpc::intention`) decide writes with the same `plan_*`
//! functions, check the same rules and read with the same queries.

use super::rpc::{client_config, client_intention};
use super::{run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request, WriteOp};
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
pub const MATCH_NAMES_MAX: usize = crate::consul::rpc::intention::MATCH_ENTRIES_MAX;

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
        _ => match write_target(&ctx.current_version(), request.rest, "") {
            Some(destination) => authz.require(a.intention_write(&destination)),
            None => Ok(()),
        },
    }
}

/// The destination whose `intentions:write` a write needs: the stored intention's when it
/// is named by `id` (`None` when there is none: the write is refused as missing), else
/// `destination`.
pub fn write_target(version: &StoreVersion, id: &str, destination: &str) -> Option<String> {
    if id.is_empty() {
        return Some(destination.to_string());
    }
    intentions::by_legacy_id(version, id).map(|(entry, _)| entry.name.to_string())
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

/// [`require_connect`] when this server answers the request itself; a client agent's
/// server, or the servers of the datacenter the request names, check it there, as
/// Consul's do.
pub fn require_connect_here(ctx: &Context, datacenter: &str) -> Result<(), ApiError> {
    if ctx.is_client() || !datacenter.is_empty() {
        return Ok(());
    }
    require_connect(ctx)
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
    intentions_in(ctx, request, reply, "")
}

fn intentions_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_connect_here(ctx, datacenter)?;
    if request.method == crate::proto::http::Method::Post {
        return create(ctx, request, datacenter);
    }
    let options = client_config::options_in(ctx, request, datacenter)?;
    let filter = list_filter(request.query.get("filter"))?;
    if !datacenter.is_empty() || ctx.reads_by_call(&options) {
        return Ok(client_intention::list(ctx, request, options, datacenter));
    }
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

/// A list's `?filter` (or `QueryOptions.Filter`), refused in Consul's words when it does
/// not parse.
pub fn list_filter(text: Option<&str>) -> Result<Option<crate::consul::filter::Filter>, ApiError> {
    match text {
        Some(text) if !text.is_empty() => Ok(Some(
            crate::consul::filter::Filter::parse(text, crate::consul::filter::INTENTION)
                .map_err(ApiError::bad_request)?
                .ok_or_else(|| ApiError::bad_request("empty filter"))?,
        )),
        _ => Ok(None),
    }
}

/// A write decided against a store version: its command, and the intention's ID (empty
/// for the writes by name).
pub struct Planned {
    pub op: IntentionOp,
    pub id: String,
}

/// `POST /v1/connect/intentions`: a legacy intention with a fresh ID.
fn create(ctx: &Context, request: &Request, datacenter: &str) -> Result<Outcome, ApiError> {
    if datacenter.is_empty() {
        super::check_datacenter(ctx, &request.query)?;
    }
    let ixn = decode_body(request)?;
    if !datacenter.is_empty() || ctx.writes_by_call() {
        return Ok(client_intention::apply(
            ctx,
            request,
            "create",
            &ixn,
            client_intention::Answer::Id,
            datacenter,
        ));
    }
    let planned = plan_create(&ctx.current_version(), &ixn, super::context::now_unix_ns())?;
    let answer = serde_json::json!({ "ID": planned.id });
    Ok(intention_write(planned.op, move |reply| {
        reply.json(200, b"", &answer)
    }))
}

/// A legacy create: Consul's checks, then a fresh ID no stored intention has.
pub fn plan_create(
    version: &StoreVersion,
    ixn: &LegacyIntention,
    now_ns: i64,
) -> Result<Planned, ApiError> {
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
    let id = loop {
        let candidate = uuid::Uuid::new_v4().to_string();
        if intentions::by_legacy_id(version, &candidate).is_none() {
            break candidate;
        }
    };
    let source = ixn.to_source(&id, Some(now_ns));
    Ok(Planned {
        op: IntentionOp::LegacyCreate {
            destination: ixn.destination_name.clone(),
            source,
        },
        id,
    })
}

/// `GET`, `PUT` and `DELETE /v1/connect/intentions/exact?source=…&destination=…`.
pub fn exact(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    exact_in(ctx, request, reply, "")
}

fn exact_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_connect_here(ctx, datacenter)?;
    let source = parse_name(required(request, "source")?, "source")?;
    let destination = parse_name(required(request, "destination")?, "destination")?;
    match request.method {
        crate::proto::http::Method::Get => {
            let options = client_config::options_in(ctx, request, datacenter)?;
            if !datacenter.is_empty() || ctx.reads_by_call(&options) {
                let query = client_intention::Get::Exact {
                    source: &source,
                    destination: &destination,
                };
                return Ok(client_intention::get(
                    ctx, request, query, options, datacenter,
                ));
            }
            run_query(ctx, ExactQuery::new(source, destination), options, reply)
        }
        crate::proto::http::Method::Put => {
            if datacenter.is_empty() {
                super::check_datacenter(ctx, &request.query)?;
            }
            let mut ixn = decode_body(request)?;
            ixn.id.clear();
            ixn.source_name = source;
            ixn.destination_name = destination;
            if !datacenter.is_empty() || ctx.writes_by_call() {
                return Ok(client_intention::apply(
                    ctx,
                    request,
                    "upsert",
                    &ixn,
                    client_intention::Answer::True,
                    datacenter,
                ));
            }
            let planned = plan_upsert(&ctx.current_version(), ixn)?;
            Ok(intention_write(planned.op, |reply| reply.json_bool(true)))
        }
        _ => {
            if datacenter.is_empty() {
                super::check_datacenter(ctx, &request.query)?;
            }
            if !datacenter.is_empty() || ctx.writes_by_call() {
                let ixn = LegacyIntention {
                    source_name: source,
                    destination_name: destination,
                    ..LegacyIntention::default()
                };
                return Ok(client_intention::apply(
                    ctx,
                    request,
                    "delete",
                    &ixn,
                    client_intention::Answer::True,
                    datacenter,
                ));
            }
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

/// An upsert by name (`PUT /v1/connect/intentions/exact`): `Meta` only when unchanged,
/// then Consul's checks.
pub fn plan_upsert(version: &StoreVersion, mut ixn: LegacyIntention) -> Result<Planned, ApiError> {
    if !ixn.meta.is_empty() {
        let previous = entries::get(
            version,
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
            None => return Err(ApiError::Internal("Meta must not be specified".to_string())),
        }
    }
    ixn.validate(false).map_err(ApiError::Internal)?;
    let source = ixn.to_source("", None);
    Ok(Planned {
        op: IntentionOp::Upsert {
            destination: ixn.destination_name.clone(),
            source,
        },
        id: String::new(),
    })
}

/// A deletion by name: `None` when there is nothing to delete (by-name deletions are
/// idempotent and answer without a write).
pub fn plan_delete_exact(
    version: &StoreVersion,
    source: &str,
    destination: &str,
) -> Option<Planned> {
    intentions::exact(version, source, destination)?;
    Some(Planned {
        op: IntentionOp::DeleteExact {
            destination: destination.to_string(),
            source: source.to_string(),
        },
        id: String::new(),
    })
}

/// `GET /v1/connect/intentions/match?by=source|destination&name=…`.
pub fn match_intentions(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    match_intentions_in(ctx, request, reply, "")
}

fn match_intentions_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_connect_here(ctx, datacenter)?;
    let options = client_config::options_in(ctx, request, datacenter)?;
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
    if !datacenter.is_empty() || ctx.reads_by_call(&options) {
        return Ok(client_intention::match_intentions(
            ctx,
            request,
            by_destination,
            names,
            options,
            datacenter,
        ));
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
    check_in(ctx, request, reply, "")
}

fn check_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_connect_here(ctx, datacenter)?;
    let options = client_config::options_in(ctx, request, datacenter)?;
    let source_type = request.query.get("source-type").unwrap_or("consul");
    let source_raw = required(request, "source")?;
    let source = if source_type == "consul" {
        parse_name(source_raw, "source")?
    } else {
        source_raw.to_string()
    };
    let destination = parse_name(required(request, "destination")?, "destination")?;
    if !datacenter.is_empty() || ctx.reads_by_call(&options) {
        return Ok(client_intention::check(
            ctx,
            request,
            &source,
            &destination,
            source_type,
            options,
            datacenter,
        ));
    }
    let query = CheckQuery::new(source, destination, default_allow(ctx));
    run_query(ctx, query, options, reply)
}

/// `GET`, `PUT` and `DELETE /v1/connect/intentions/<id>`: the legacy API by ID.
pub fn by_id(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    by_id_in(ctx, request, reply, "")
}

fn by_id_in(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    require_connect_here(ctx, datacenter)?;
    let id = request.rest.to_string();
    match request.method {
        crate::proto::http::Method::Get => {
            let options = client_config::options_in(ctx, request, datacenter)?;
            if !datacenter.is_empty() || ctx.reads_by_call(&options) {
                let query = client_intention::Get::Id(&id);
                return Ok(client_intention::get(
                    ctx, request, query, options, datacenter,
                ));
            }
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
            if datacenter.is_empty() {
                super::check_datacenter(ctx, &request.query)?;
            }
            let mut ixn = decode_body(request)?;
            if !datacenter.is_empty() || ctx.writes_by_call() {
                ixn.id = id;
                return Ok(client_intention::apply(
                    ctx,
                    request,
                    "update",
                    &ixn,
                    client_intention::Answer::Id,
                    datacenter,
                ));
            }
            let planned = plan_update(
                &ctx.current_version(),
                &id,
                &ixn,
                super::context::now_unix_ns(),
            )?;
            let answer = serde_json::json!({ "ID": planned.id });
            Ok(intention_write(planned.op, move |reply| {
                reply.json(200, b"", &answer)
            }))
        }
        _ => {
            if datacenter.is_empty() {
                super::check_datacenter(ctx, &request.query)?;
            }
            if !datacenter.is_empty() || ctx.writes_by_call() {
                let ixn = LegacyIntention {
                    id,
                    ..LegacyIntention::default()
                };
                return Ok(client_intention::apply(
                    ctx,
                    request,
                    "delete",
                    &ixn,
                    client_intention::Answer::True,
                    datacenter,
                ));
            }
            let planned = plan_delete(&ctx.current_version(), &id)?;
            Ok(intention_write(planned.op, |reply| reply.json_bool(true)))
        }
    }
}

/// An intentions request naming another datacenter (`?dc=`): parsed and checked as the
/// handler does (the same errors), then that datacenter's typed call. `None` for a path
/// that is not the intentions'.
pub fn elsewhere(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    let handler: super::DatacenterHandler = match request.path {
        "/v1/connect/intentions" => intentions_in,
        "/v1/connect/intentions/exact" => exact_in,
        "/v1/connect/intentions/match" => match_intentions_in,
        "/v1/connect/intentions/check" => check_in,
        path if path.starts_with("/v1/connect/intentions/") => by_id_in,
        _ => return None,
    };
    Some(super::run_for_datacenter(ctx, request, datacenter, handler))
}

/// A legacy update of the intention `id`: it must exist and keep its destination.
pub fn plan_update(
    version: &StoreVersion,
    id: &str,
    ixn: &LegacyIntention,
    now_ns: i64,
) -> Result<Planned, ApiError> {
    let Some((entry, _)) = intentions::by_legacy_id(version, id) else {
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
    let source = ixn.to_source(id, Some(now_ns));
    Ok(Planned {
        op: IntentionOp::LegacyUpdate {
            id: id.to_string(),
            destination: ixn.destination_name.clone(),
            source,
        },
        id: id.to_string(),
    })
}

/// A legacy deletion of the intention `id`, which must exist.
pub fn plan_delete(version: &StoreVersion, id: &str) -> Result<Planned, ApiError> {
    if intentions::by_legacy_id(version, id).is_none() {
        return Err(ApiError::Internal(format!(
            "Cannot delete non-existent intention: '{id}'"
        )));
    }
    Ok(Planned {
        op: IntentionOp::LegacyDelete { id: id.to_string() },
        id: id.to_string(),
    })
}

fn send_doc(reply: &mut Reply, meta: QueryMeta, extra_headers: &[u8], body: &Doc) {
    let mut headers = Vec::with_capacity(200);
    meta.write_headers(&mut headers);
    headers.extend_from_slice(extra_headers);
    send_rendered(reply, &headers, body);
}

/// Answers a rendered intention document with `headers`, in the request's layout. A
/// client agent answers its typed replies with it.
pub fn send_rendered(reply: &mut Reply, headers: &[u8], body: &Doc) {
    let compact = body.to_json();
    if reply.pretty {
        let mut out = Vec::with_capacity(compact.len() * 2);
        doc::indent(compact.as_bytes(), &mut out);
        reply.json_bytes(200, headers, &out);
    } else {
        reply.json_bytes(200, headers, compact.as_bytes());
    }
}

/// The `{"Allowed": …}` answer of a check.
pub fn check_doc(allowed: bool) -> Doc {
    Doc::Obj(vec![("Allowed".to_string(), Doc::Bool(allowed))])
}

/// The answer of a match: each name as the request gave it, with its intentions (a name
/// given twice once), keys sorted as Go writes a map's.
pub fn match_doc(found: Vec<(String, Vec<Doc>)>) -> Doc {
    let mut pairs: Vec<(String, Doc)> = Vec::with_capacity(found.len());
    for (given, docs) in found {
        pairs.retain(|(k, _)| *k != given);
        pairs.push((given, Doc::List(docs)));
    }
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    Doc::Obj(pairs)
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
        NOT_FOUND.as_bytes(),
    );
}

/// Consul's answer for an intention that is not there (`ErrIntentionNotFound`).
pub const NOT_FOUND: &str = "Intention not found";

/// A stored intention: its destination's entry and its source.
pub type Found<'t> = (&'t entries::ConfigEntry, &'t intentions::SourceIntention);

/// Every intention, less what the token may not read and what the filter leaves out.
pub struct ListQuery {
    pub rows: super::authz::RowFilter,
    pub filter: Option<crate::consul::filter::Filter>,
}

impl ListQuery {
    /// The intentions listed, and whether the token hid any.
    pub fn listed<'t>(&self, tables: &'t Tables) -> (Vec<Found<'t>>, bool) {
        let mut list = Vec::new();
        let mut hidden = false;
        for (entry, source) in intentions::all(tables) {
            if let Some(filter) = &self.filter {
                let value: serde_json::Value =
                    serde_json::from_str(&legacy(entry, source).to_json()).unwrap_or_default();
                if !filter.matches(&value) {
                    continue;
                }
            }
            if !self.rows.intention(&entry.name) {
                hidden = true;
                continue;
            }
            list.push((entry, source));
        }
        (list, hidden)
    }
}

impl Query for ListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            entries::entries_index(tables),
            WatchSet::new().prefix(Table::ConfigEntries, entries_prefix()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let (found, hidden) = self.listed(tables);
        let list = found.into_iter().map(|(e, s)| legacy(e, s)).collect();
        let mut extra = Vec::new();
        self.rows.write_header(hidden, &mut extra);
        send_doc(reply, meta, &extra, &Doc::List(list));
    }
}

/// One intention by source and destination.
pub struct ExactQuery {
    pub source: String,
    pub destination: String,
    key: Arc<str>,
}

impl ExactQuery {
    pub fn new(source: String, destination: String) -> ExactQuery {
        let key = entry_key(&destination);
        ExactQuery {
            source,
            destination,
            key,
        }
    }

    pub fn found<'t>(&self, tables: &'t Tables) -> Option<Found<'t>> {
        intentions::exact(tables, &self.source, &self.destination).map(|(e, s)| (&**e, s))
    }
}

impl Query for ExactQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            entries::entries_index(tables),
            WatchSet::new().key(Table::ConfigEntries, self.key.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        match self.found(tables) {
            Some((entry, source)) => send_doc(reply, meta, b"", &legacy(entry, source)),
            None => not_found(reply, meta),
        }
    }
}

/// One intention by its legacy ID; `intentions:read` on its destination.
pub struct IdQuery {
    pub id: String,
    pub acl: Option<Arc<Authorizer>>,
}

impl IdQuery {
    /// The intention, or the refusal's text when the token may not read it.
    pub fn found<'t>(&self, tables: &'t Tables) -> Result<Option<Found<'t>>, String> {
        let Some((entry, source)) = intentions::by_legacy_id(tables, &self.id) else {
            return Ok(None);
        };
        if let Some(Err(denial)) = self.acl.as_ref().map(|a| a.intention_read(&entry.name)) {
            return Err(denial.message(None));
        }
        Ok(Some((entry, source)))
    }
}

impl Query for IdQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            entries::entries_index(tables),
            WatchSet::new().prefix(Table::ConfigEntries, entries_prefix()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        match self.found(tables) {
            Err(text) => {
                reply.send(403, Some("text/plain; charset=utf-8"), b"", text.as_bytes());
            }
            Ok(Some((entry, source))) => send_doc(reply, meta, b"", &legacy(entry, source)),
            Ok(None) => not_found(reply, meta),
        }
    }
}

/// The intentions that apply to each name, by source or by destination.
pub struct MatchQuery {
    pub by_destination: bool,
    /// (as given, as parsed)
    pub names: Vec<(String, String)>,
}

impl MatchQuery {
    /// Each name's intentions, in the order the names were given.
    pub fn found<'t>(&self, tables: &'t Tables) -> Vec<Vec<Found<'t>>> {
        self.names
            .iter()
            .map(|(_, name)| intentions::matches(tables, name, self.by_destination))
            .collect()
    }
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
        let found = self
            .names
            .iter()
            .zip(self.found(tables))
            .map(|((given, _), found)| {
                let docs = found.into_iter().map(|(e, s)| legacy(e, s)).collect();
                (given.clone(), docs)
            })
            .collect();
        send_doc(reply, meta, b"", &match_doc(found));
    }
}

/// Whether a source may connect to a destination.
pub struct CheckQuery {
    keys: [Arc<str>; 2],
    source: String,
    destination: String,
    default_allow: bool,
}

impl CheckQuery {
    pub fn new(source: String, destination: String, default_allow: bool) -> CheckQuery {
        CheckQuery {
            keys: [entry_key(&destination), entry_key(WILDCARD)],
            source,
            destination,
            default_allow,
        }
    }

    pub fn allowed(&self, tables: &Tables) -> bool {
        intentions::decide(tables, &self.source, &self.destination).allowed(self.default_allow)
    }
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
        send_doc(reply, meta, b"", &check_doc(self.allowed(tables)));
    }
}
