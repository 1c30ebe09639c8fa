//! `Session.Apply`, `Session.Get`, `Session.List`, `Session.NodeSessions` and
//! `Session.Renew`, as Consul's `session_endpoint.go` serves them: a create gets its ID
//! here, on the leader (so every server applies the same row), after Consul's checks of
//! the node, behavior and TTL; a renewal resets the leader's timer and answers the session.

use super::{
    authorize, decode_error, elsewhere, propose_typed, read, read_here, require, rows, Answer,
    Placement, Read,
};
use crate::api::authz::RowFilter;
use crate::api::server::Server;
use crate::consul::rpc::catalog::{DcSpecificRequest, NodeSpecificRequest};
use crate::consul::rpc::session::{decode_apply, write_sessions, SessionSpecificRequest};
use crate::consul::rpc::QueryMeta;
use crate::proto::duration::{format_go_duration, parse_go_duration_nanos};
use crate::proto::msgpack::Writer;
use crate::replica::ProposalResult;
use crate::shard::rpc_server::TypedCall;
use crate::shard::runtime::OperatorOp;
use crate::shard::watch::WatchSet;
use crate::store::session::{
    self, node_watch_key, Behavior, Session, SessionOp, SESSION_TTL_MAX_NS,
};
use crate::store::{Command, CommandResult, SessionResult, StoreVersion, Table, Tables};
use std::sync::Arc;

fn string_reply(text: &str) -> Vec<u8> {
    let mut w = Writer::new();
    w.str(text);
    w.into_inner()
}

/// `Session.Apply`: creates a session (answering its ID) or destroys one (answering "").
pub async fn apply(server: &Server, call: &TypedCall) -> Answer {
    let mut request = decode_apply(&call.body, "")?;
    if let Some(answer) =
        elsewhere(server, call, &request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let ctx = server.context();
    let authz = authorize(server, &request.token)?;
    match request.op.as_str() {
        "create" => {}
        "destroy" => {
            let id = request.session.id.to_string();
            if id.is_empty() {
                return Err("Must provide ID".to_string());
            }
            let version = ctx.current_version();
            let Some(existing) = session::get(&version, &id) else {
                // Nothing to destroy: Consul's state store answers nothing either.
                return Ok(string_reply(""));
            };
            require(&authz, |a| a.session_write(&existing.node))?;
            drop(version);
            let destroy = Command::Session(SessionOp::Destroy { id });
            return match propose_typed(server, destroy).await? {
                SessionResult::Refused(reason) => Err(reason),
                SessionResult::Created | SessionResult::Destroyed => Ok(string_reply("")),
            };
        }
        other => return Err(format!("Invalid session operation '{other}'")),
    }
    let session = &mut request.session;
    if session.node.is_empty() {
        return Err("Must provide Node".to_string());
    }
    require(&authz, |a| a.session_write(&session.node))?;
    session.behavior = Behavior::parse(&request.behavior)
        .ok_or_else(|| format!("Invalid Behavior setting '{}'", request.behavior))?;
    if !session.ttl.is_empty() {
        let ttl = parse_go_duration_nanos(&session.ttl)
            .map_err(|e| format!("Session TTL '{}' invalid: {e}", session.ttl))?;
        let min_ns = ctx.config().session_ttl_min_ns;
        if ttl != 0 && !(min_ns..=SESSION_TTL_MAX_NS).contains(&ttl) {
            return Err(format!(
                "Invalid Session TTL '{ttl}', must be between [{}={}]",
                format_go_duration(min_ns),
                format_go_duration(SESSION_TTL_MAX_NS)
            ));
        }
    }
    // A fresh ID, checked against the state as Consul does.
    let version = ctx.current_version();
    let id = loop {
        let candidate = uuid::Uuid::new_v4().to_string();
        if session::get(&version, &candidate).is_none() {
            break candidate;
        }
    };
    drop(version);
    session.id = Arc::from(id.as_str());
    let command = Command::Session(SessionOp::Create(Box::new(request.session)));
    match propose_typed(server, command).await? {
        SessionResult::Refused(reason) => Err(reason),
        SessionResult::Created | SessionResult::Destroyed => Ok(string_reply(&id)),
    }
}

/// An `IndexedSessions` reply of the sessions the token may read.
fn sessions_reply(meta: &QueryMeta, rows: &RowFilter, mut found: Vec<&Arc<Session>>) -> Answer {
    let hidden = rows.retain(&mut found, |rows, s| rows.session(&s.node));
    let meta = meta.filtered(hidden);
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Sessions"], |_, w| {
        write_sessions(w, found.iter().map(|s| &***s))
    });
    Ok(w.into_inner())
}

struct One {
    id: Arc<str>,
    rows: RowFilter,
}

impl Read for One {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            session::sessions_index(tables),
            WatchSet::new().key(Table::Sessions, self.id.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        sessions_reply(
            meta,
            &self.rows,
            session::get(version, &self.id).into_iter().collect(),
        )
    }
}

/// `Session.Get`.
pub async fn get(server: &Server, call: &TypedCall) -> Answer {
    let request = SessionSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = One {
        id: Arc::from(request.session_id.to_ascii_lowercase().as_str()),
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

struct All {
    rows: RowFilter,
}

impl Read for All {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            session::sessions_index(tables),
            WatchSet::new().table(Table::Sessions),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        sessions_reply(meta, &self.rows, session::list(version).collect())
    }
}

/// `Session.List`.
pub async fn list(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    read(server, call, &request.options, All { rows: rows(&authz) }).await
}

struct OfNode {
    node: String,
    watch_key: Arc<str>,
    rows: RowFilter,
}

impl Read for OfNode {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            session::sessions_index(tables),
            WatchSet::new().key(Table::Sessions, self.watch_key.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        sessions_reply(
            meta,
            &self.rows,
            session::node_sessions(version, &self.node),
        )
    }
}

/// `Session.NodeSessions`.
pub async fn node_sessions(server: &Server, call: &TypedCall) -> Answer {
    let request = NodeSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = OfNode {
        node: request.node.to_string(),
        watch_key: node_watch_key(request.node),
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// `Session.Renew`: on the leader, which keeps the TTL timers; the session as a one-element
/// list, or none once it is gone.
pub async fn renew(server: &Server, call: &TypedCall) -> Answer {
    let request = SessionSpecificRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let ctx = server.context();
    let authz = authorize(server, request.options.token)?;
    let id = request.session_id.to_ascii_lowercase();
    let version = ctx.current_version();
    let found = session::get(&version, &id).cloned();
    let index = session::sessions_index(&version).max(1);
    drop(version);
    let meta = {
        let m = ctx.query_meta(index, crate::shard::runtime::Consistency::Leader);
        QueryMeta {
            index,
            last_contact_ns: 0,
            known_leader: m.known_leader,
            consistency_level: "leader",
            not_modified: false,
            results_filtered_by_acls: false,
        }
    };
    let Some(row) = found else {
        return sessions_reply(&meta, &RowFilter::default(), Vec::new());
    };
    require(&authz, |a| a.session_write(&row.node))?;
    match server
        .shard()
        .operator(OperatorOp::RenewSession { id })
        .await
    {
        ProposalResult::Applied(CommandResult::Bool(true)) => {
            sessions_reply(&meta, &RowFilter::default(), vec![&row])
        }
        ProposalResult::Applied(CommandResult::Bool(false)) => {
            sessions_reply(&meta, &RowFilter::default(), Vec::new())
        }
        ProposalResult::Applied(CommandResult::Error(reason)) => Err(reason),
        ProposalResult::Applied(_) => Err("unexpected result for a session renewal".to_string()),
        refused => Err(refused.to_string()),
    }
}
