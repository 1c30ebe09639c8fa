//! `/v1/session/*`: create, destroy, renew, info, node, list — Consul's session API.
//!
//! Create defaults as Consul's agent does (the agent's node, the `serfHealth` check, a 15 s
//! lock-delay, `release`), validates TTL and behavior as Consul's session endpoint does, and
//! generates the session ID here, on the leader, so the command every server applies carries
//! it. Renewals go to the leader, which keeps the TTL timers; they
//! touch no log entry. On a client agent each endpoint is its typed call
//! (`rpc::client_session`): the agent decodes and defaults a create, the server does the rest.
//!
//! Reads report the sessions table index, as Consul does, and block precisely: info on the
//! session's key, node on the node's key, list on the table.

use super::authz::RowFilter;
use super::rpc::client_session::{self, Which};
use super::{
    query_options, run_query, ApiError, Context, LeaderOp, Outcome, Query, QueryMeta, Reply,
    Request, WriteOp,
};
use crate::consul::body::{normalize_key, parse_strict, Obj};
use crate::consul::json::JsonWriter;
use crate::proto::duration::{format_go_duration, parse_go_duration_nanos};
use crate::shard::runtime::OperatorOp;
use crate::shard::watch::WatchSet;
use crate::store::catalog::SERF_CHECK_ID;
use crate::store::session::{
    self, node_watch_key, Behavior, ServiceCheck, Session, SessionOp, LOCK_DELAY_DEFAULT_NS,
    SESSION_TTL_MAX_NS,
};
use crate::store::{CommandResult, SessionResult, StoreVersion, Table, Tables};
use serde_json::Value;
use std::sync::Arc;

/// Consul reads a numeric `LockDelay` below this as seconds rather than nanoseconds (users
/// send `5` meaning five seconds).
const LOCK_DELAY_SECONDS_BELOW: i64 = 1000;
const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// The value of a body field by normalized name, `null` included (Consul tells an explicit
/// `null` or `[]` apart from an absent field for the checks lists).
fn field<'a>(obj: &Obj<'a>, name: &str) -> Option<&'a Value> {
    obj.map()
        .iter()
        .find(|(key, _)| normalize_key(key) == name)
        .map(|(_, value)| value)
}

/// A list of strings where `null` is Go's nil slice (`None`).
fn string_list(obj: &Obj, name: &str) -> Result<Option<Option<Vec<String>>>, String> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(_) => Ok(Some(Some(obj.str_list(&[name])?))),
    }
}

/// Consul's `LockDelay`: a Go duration string or a number of nanoseconds, small numbers
/// meaning seconds.
fn lock_delay_ns(value: &Value) -> Result<i64, String> {
    let ns = match value {
        Value::String(text) => parse_go_duration_nanos(text).map_err(|e| e.to_string())?,
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .ok_or_else(|| format!("LockDelay: {n} is not a duration"))?,
        other => return Err(format!("LockDelay: expected a duration, got {other}")),
    };
    Ok(if ns < LOCK_DELAY_SECONDS_BELOW {
        ns.saturating_mul(NANOS_PER_SECOND)
    } else {
        ns
    })
}

/// Decodes a create body onto Consul's defaults, including `fixupEmptySessionChecks`. The
/// behavior comes back as text: Consul refuses a bad one later, with a different status.
fn decode_create(body: &[u8], default_node: &str) -> Result<(Session, String), String> {
    let value = parse_strict(body, &crate::consul::bodies::SESSION)?;
    let obj = Obj::new(&value)?;
    let mut checks: Vec<String> = vec![SERF_CHECK_ID.to_string()];
    let mut node_checks: Option<Vec<String>> = Some(vec![SERF_CHECK_ID.to_string()]);
    if let Some(given) = string_list(&obj, "checks")? {
        checks = given.unwrap_or_default();
    }
    if let Some(given) = string_list(&obj, "nodechecks")? {
        node_checks = given;
    }
    let service_checks = match field(&obj, "servicechecks") {
        None | Some(Value::Null) => None,
        Some(_) => Some(
            obj.obj_list(&["servicechecks"])?
                .iter()
                .map(|check| {
                    Ok(ServiceCheck {
                        id: check.string(&["id"])?,
                        namespace: check.string(&["namespace"])?,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?,
        ),
    };
    // Consul's backwards-compatible reading of `Checks` next to `NodeChecks`.
    // An empty `Checks` empties `NodeChecks` too; `Checks` that is just the default serf
    // check, or that comes with empty `NodeChecks`, is dropped in favour of `NodeChecks`.
    let only_serf = checks.len() == 1 && checks[0] == SERF_CHECK_ID;
    if checks.is_empty() {
        node_checks = Some(Vec::new());
    } else if only_serf || node_checks.as_ref().is_none_or(Vec::is_empty) {
        checks.clear();
    }
    let lock_delay_ns = match field(&obj, "lockdelay") {
        None | Some(Value::Null) => LOCK_DELAY_DEFAULT_NS,
        Some(value) => lock_delay_ns(value)?,
    };
    let node = obj
        .opt_string(&["node"])?
        .unwrap_or_else(|| default_node.to_string());
    let session = Session {
        id: Arc::from(""),
        name: obj.string(&["name"])?,
        node,
        lock_delay_ns,
        behavior: Behavior::Release,
        ttl: obj.string(&["ttl"])?,
        node_checks,
        service_checks,
        checks,
        create_index: 0,
        modify_index: 0,
    };
    session.check_limits()?;
    Ok((session, obj.string(&["behavior"])?))
}

/// Consul's Go formatting of the TTL bounds (`session_ttl_min` and the fixed maximum), for
/// its error text.
fn ttl_bounds_text(min_ns: i64) -> String {
    format!(
        "[{}={}]",
        format_go_duration(min_ns),
        format_go_duration(SESSION_TTL_MAX_NS)
    )
}

/// `PUT /v1/session/create`.
pub fn create(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    create_in(ctx, request, "")
}

/// A create in `datacenter` (empty: this one; another goes as its typed call naming it,
/// with this agent's node as Consul's agent fills it in).
pub(crate) fn create_in(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let default_node = ctx.config().node_name.as_str();
    let (mut session, behavior_text) = decode_create(request.body, default_node)
        .map_err(|e| ApiError::bad_request(format!("Request decode failed: {e}")))?;
    if !datacenter.is_empty() || ctx.writes_by_call() {
        // The server checks the rest, in the same words, and picks the ID.
        return Ok(client_session::create(
            ctx,
            request,
            &session,
            &behavior_text,
            datacenter,
        ));
    }
    // The session endpoint's checks, with its words and its 500 status.
    if session.node.is_empty() {
        return Err(ApiError::Internal("Must provide Node".to_string()));
    }
    session.behavior = Behavior::parse(&behavior_text)
        .ok_or_else(|| ApiError::Internal(format!("Invalid Behavior setting '{behavior_text}'")))?;
    if !session.ttl.is_empty() {
        let ttl = parse_go_duration_nanos(&session.ttl).map_err(|e| {
            ApiError::Internal(format!("Session TTL '{}' invalid: {e}", session.ttl))
        })?;
        let min_ns = ctx.config().session_ttl_min_ns;
        if ttl != 0 && !(min_ns..=SESSION_TTL_MAX_NS).contains(&ttl) {
            return Err(ApiError::Internal(format!(
                "Invalid Session TTL '{ttl}', must be between {}",
                ttl_bounds_text(min_ns)
            )));
        }
    }
    // A fresh ID, checked against the state as Consul does; the command carries it so
    // every server inserts the same row.
    let version = ctx.current_version();
    let id = loop {
        let candidate = uuid::Uuid::new_v4().to_string();
        if session::get(&version, &candidate).is_none() {
            break candidate;
        }
    };
    session.id = Arc::from(id.as_str());
    Ok(Outcome::Write(WriteOp::session(
        SessionOp::Create(Box::new(session)),
        move |result, reply| match result {
            SessionResult::Created | SessionResult::Destroyed => {
                reply.json(200, b"", &serde_json::json!({ "ID": id }))
            }
            SessionResult::Refused(reason) => reply.error(&ApiError::Internal(reason)),
        },
    )))
}

/// `PUT /v1/session/destroy/<id>`: `true`, also for a session that does not exist.
pub fn destroy(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    let id = session_id(request)?;
    if ctx.writes_by_call() {
        return Ok(client_session::destroy(ctx, request, &id, ""));
    }
    // Consul answers without a log entry when there is nothing to destroy.
    if ctx.is_leader() && session::get(&ctx.current_version(), &id).is_none() {
        reply.json_bool(true);
        return Ok(Outcome::Done);
    }
    Ok(Outcome::Write(WriteOp::session(
        SessionOp::Destroy { id },
        |result, reply| match result {
            SessionResult::Refused(reason) => reply.error(&ApiError::Internal(reason)),
            SessionResult::Created | SessionResult::Destroyed => reply.json_bool(true),
        },
    )))
}

/// A destroy in another datacenter, as `Session.Apply` naming it.
pub(crate) fn destroy_in(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let id = session_id(request)?;
    Ok(client_session::destroy(ctx, request, &id, datacenter))
}

/// The session ID a destroy or renewal names (lowercased, as Consul's IDs are).
fn session_id(request: &Request) -> Result<String, ApiError> {
    if request.rest.is_empty() {
        return Err(ApiError::bad_request("Missing session"));
    }
    Ok(request.rest.to_ascii_lowercase())
}

/// A renewal in another datacenter, as `Session.Renew` naming it.
pub(crate) fn renew_in(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let id = session_id(request)?;
    Ok(client_session::renew(ctx, request, &id, datacenter))
}

/// `PUT /v1/session/renew/<id>`: the session as a one-element list, 404 once it is gone.
pub fn renew(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    let id = session_id(request)?;
    if ctx.writes_by_call() {
        return Ok(client_session::renew(ctx, request, &id, ""));
    }
    // Only the leader keeps timers, and only its state says whether the session lives:
    // anyone else sent `Session.Renew` to it above.
    debug_assert!(ctx.is_leader(), "a session is renewed on the leader");
    let not_found = format!("Session id '{id}' not found");
    let Some(row) = session::get(&ctx.current_version(), &id).cloned() else {
        return Err(ApiError::NotFound(not_found));
    };
    Ok(Outcome::Leader(LeaderOp::Operator {
        op: OperatorOp::RenewSession { id },
        respond: Box::new(move |result, reply: &mut Reply| match result {
            CommandResult::Bool(true) => {
                let mut body = Vec::with_capacity(512);
                write_sessions(&mut body, reply.pretty, std::iter::once(&row));
                reply.json_bytes(200, b"", &body);
            }
            CommandResult::Bool(false) => reply.error(&ApiError::NotFound(not_found)),
            CommandResult::Error(reason) => reply.error(&ApiError::Internal(reason)),
            _ => reply.error(&ApiError::Internal(
                "unexpected result for a session renewal".to_string(),
            )),
        }),
    }))
}

/// Writes sessions as Consul's `Session` JSON list.
pub fn write_sessions<'s>(
    out: &mut Vec<u8>,
    pretty: bool,
    sessions: impl Iterator<Item = &'s Arc<Session>>,
) {
    let mut w = JsonWriter::new(out, pretty);
    w.begin_array();
    for session in sessions {
        w.begin_object();
        w.field_str("ID", &session.id);
        w.field_str("Name", &session.name);
        w.field_str("Node", &session.node);
        w.field_i64("LockDelay", session.lock_delay_ns);
        w.field_str("Behavior", session.behavior.as_str());
        w.field_str("TTL", &session.ttl);
        match &session.node_checks {
            Some(checks) => w.field_str_array("NodeChecks", checks.iter().map(String::as_str)),
            None => w.field_null("NodeChecks"),
        }
        match &session.service_checks {
            Some(checks) => {
                w.field_array("ServiceChecks");
                for check in checks {
                    w.begin_object();
                    w.field_str("ID", &check.id);
                    w.field_str("Namespace", &check.namespace);
                    w.end_object();
                }
                w.end_array();
            }
            None => w.field_null("ServiceChecks"),
        }
        if !session.checks.is_empty() {
            w.field_str_array("Checks", session.checks.iter().map(String::as_str));
        }
        w.field_u64("CreateIndex", session.create_index);
        w.field_u64("ModifyIndex", session.modify_index);
        w.end_object();
    }
    w.end_array();
    w.finish();
}

/// Answers with the sessions the token may read (`session:read` on each one's node).
fn respond_with(
    meta: QueryMeta,
    reply: &mut Reply,
    rows: &RowFilter,
    mut sessions: Vec<&Arc<Session>>,
) {
    let hidden = rows.retain(&mut sessions, |rows, s| rows.session(&s.node));
    let headers = rows.list_headers(meta, hidden);
    let mut body = Vec::with_capacity(64 + sessions.len() * 320);
    write_sessions(&mut body, reply.pretty, sessions.into_iter());
    reply.json_bytes(200, &headers, &body);
}

struct InfoQuery {
    id: Arc<str>,
    rows: RowFilter,
}

impl Query for InfoQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            session::sessions_index(tables),
            WatchSet::new().key(Table::Sessions, self.id.clone()),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        respond_with(
            meta,
            reply,
            &self.rows,
            session::get(tables, &self.id).into_iter().collect(),
        );
    }
}

struct NodeQuery {
    node: String,
    watch_key: Arc<str>,
    rows: RowFilter,
}

impl Query for NodeQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            session::sessions_index(tables),
            WatchSet::new().key(Table::Sessions, self.watch_key.clone()),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        respond_with(
            meta,
            reply,
            &self.rows,
            session::node_sessions(tables, &self.node),
        );
    }
}

struct ListQuery {
    rows: RowFilter,
}

impl Query for ListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            session::sessions_index(tables),
            WatchSet::new().table(Table::Sessions),
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        respond_with(meta, reply, &self.rows, session::list(tables).collect());
    }
}

/// `GET /v1/session/info/<id>`: `[session]`, or `[]` when it does not exist.
pub fn info(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    let id: Arc<str> = Arc::from(session_id(request)?);
    if ctx.reads_by_call(&options) {
        return Ok(client_session::read(
            ctx,
            request,
            Which::One(&id),
            options,
            "",
        ));
    }
    let rows = RowFilter::of(request);
    run_query(ctx, InfoQuery { id, rows }, options, reply)
}

/// `GET /v1/session/node/<node>`.
pub fn node_sessions(
    ctx: &Context,
    request: &Request,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let node = request.rest;
    let options = query_options(ctx, &request.query)?;
    if node.is_empty() {
        return Err(ApiError::bad_request("Missing node name"));
    }
    if ctx.reads_by_call(&options) {
        return Ok(client_session::read(
            ctx,
            request,
            Which::OfNode(node),
            options,
            "",
        ));
    }
    let query = NodeQuery {
        node: node.to_string(),
        watch_key: node_watch_key(node),
        rows: RowFilter::of(request),
    };
    run_query(ctx, query, options, reply)
}

/// `GET /v1/session/list`.
pub fn list(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        return Ok(client_session::read(ctx, request, Which::All, options, ""));
    }
    let rows = RowFilter::of(request);
    run_query(ctx, ListQuery { rows }, options, reply)
}

/// `GET /v1/session/info/<id>` in another datacenter, as `Session.Get` naming it.
pub(crate) fn info_in(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = super::query_options_in(ctx, &request.query)?;
    let id = session_id(request)?;
    Ok(client_session::read(
        ctx,
        request,
        Which::One(&id),
        options,
        datacenter,
    ))
}

/// `GET /v1/session/node/<node>` in another datacenter, as `Session.NodeSessions`.
pub(crate) fn node_sessions_in(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = super::query_options_in(ctx, &request.query)?;
    if request.rest.is_empty() {
        return Err(ApiError::bad_request("Missing node name"));
    }
    Ok(client_session::read(
        ctx,
        request,
        Which::OfNode(request.rest),
        options,
        datacenter,
    ))
}

/// `GET /v1/session/list` in another datacenter, as `Session.List` naming it.
pub(crate) fn list_in(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let options = super::query_options_in(ctx, &request.query)?;
    Ok(client_session::read(
        ctx,
        request,
        Which::All,
        options,
        datacenter,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: &str) -> Session {
        decode_create(body.as_bytes(), "agent").unwrap().0
    }

    #[test]
    fn create_defaults_follow_consuls_agent() {
        let s = decode("");
        assert_eq!(s.node, "agent");
        assert_eq!(s.node_checks, Some(vec!["serfHealth".to_string()]));
        assert!(s.checks.is_empty());
        assert_eq!(s.lock_delay_ns, 15 * NANOS_PER_SECOND);
        assert_eq!(s.service_checks, None);
    }

    #[test]
    fn empty_checks_drop_the_serf_check() {
        let s = decode(r#"{"checks": []}"#);
        assert_eq!(s.node_checks, Some(vec![]));
        assert!(s.check_ids().next().is_none());
        let s = decode(r#"{"Checks": null}"#);
        assert!(s.check_ids().next().is_none());
        let s = decode(r#"{"NodeChecks": []}"#);
        assert!(s.check_ids().next().is_none());
        let s = decode(r#"{"Checks": ["a", "b"]}"#);
        let ids: Vec<&str> = s.check_ids().collect();
        assert_eq!(ids, vec!["a", "b", "serfHealth"]);
        let s = decode(r#"{"NodeChecks": ["x"], "ServiceChecks": [{"ID": "svc"}]}"#);
        let ids: Vec<&str> = s.check_ids().collect();
        assert_eq!(ids, vec!["x", "svc"]);
    }

    #[test]
    fn lock_delay_accepts_go_durations_and_numbers() {
        assert_eq!(
            decode(r#"{"LockDelay": "1.5s"}"#).lock_delay_ns,
            1_500_000_000
        );
        assert_eq!(
            decode(r#"{"lockdelay": 5}"#).lock_delay_ns,
            5 * NANOS_PER_SECOND
        );
        assert_eq!(
            decode(r#"{"LockDelay": "20ns"}"#).lock_delay_ns,
            20 * NANOS_PER_SECOND
        );
        assert_eq!(
            decode(r#"{"LockDelay": 2000000000}"#).lock_delay_ns,
            2 * NANOS_PER_SECOND
        );
        assert_eq!(decode(r#"{"LockDelay": "0s"}"#).lock_delay_ns, 0);
        assert!(decode_create(br#"{"LockDelay": "soon"}"#, "a").is_err());
        assert!(decode_create(b"{", "a").is_err());
    }

    #[test]
    fn sessions_render_as_consul_does() {
        let session = Arc::new(Session {
            id: Arc::from("adf4238a-882b-9ddc-4a9d-5b6758e4159e"),
            name: "test".into(),
            node: "n1".into(),
            lock_delay_ns: 15 * NANOS_PER_SECOND,
            behavior: Behavior::Delete,
            ttl: "15.0s".into(),
            node_checks: Some(vec!["serfHealth".into()]),
            service_checks: None,
            checks: Vec::new(),
            create_index: 7,
            modify_index: 7,
        });
        let mut out = Vec::new();
        write_sessions(&mut out, false, std::iter::once(&session));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"[{"ID":"adf4238a-882b-9ddc-4a9d-5b6758e4159e","Name":"test","Node":"n1","LockDelay":15000000000,"Behavior":"delete","TTL":"15.0s","NodeChecks":["serfHealth"],"ServiceChecks":null,"CreateIndex":7,"ModifyIndex":7}]"#
        );
    }
}
