//! `PreparedQuery.Apply`, `Get`, `List`, `Explain`, `Execute` and `ExecuteRemote`, as
//! Consul's `prepared_query_endpoint.go` serves them, from the pieces `/v1/query` uses: the
//! store's resolution and selection, the HTTP layer's ordering and failover
//! ([`crate::api::query`]), the same ACL rules (`query:write` on a written query's name,
//! old and new; `query:read` on a read or explained one; an execution's instances filtered
//! by the query's own token when it has one, else by the caller's).
//!
//! `Execute` and `Explain` are one-shot reads (they do not block), placed by their
//! consistency as any read is; `Get` and `List` block on `MinQueryIndex`. `Apply` runs on
//! the leader, which makes a new query's ID, and answers it.

use super::{
    authorize, consistency, decode_error, elsewhere, one_shot_here, propose_typed, read, read_here,
    require, rows, Answer, Placement, Read,
};
use crate::api::authz::{Authz, RowFilter};
use crate::api::query::{self as http_query, ExecuteRequest as Asked};
use crate::api::server::Server;
use crate::consul::query::REDACTED_TOKEN;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::prepared_query::{
    write_execute_response, write_explain_response, write_indexed_queries, ExecuteRemoteRequest,
    ExecuteRequest, Execution, QueryRequest, SpecificRequest,
};
use crate::consul::rpc::QueryMeta;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::query::{self, select::select, PreparedQuery, QueryOp};
use crate::store::{Command, QueryResult, StoreVersion, Table, Tables};
use std::sync::Arc;

/// Whether stored tokens may be shown to the caller: with ACLs off, or to a token with
/// `acl:write`.
fn shows_tokens(authz: &Option<Authz>) -> bool {
    authz
        .as_ref()
        .is_none_or(|authz| authz.authorizer.acl_write().is_ok())
}

fn token_shown(query: &PreparedQuery, show_tokens: bool) -> &str {
    if show_tokens || query.token.is_empty() {
        &query.token
    } else {
        REDACTED_TOKEN
    }
}

/// The filter an execution's instances pass: the query's own token's rules when it was
/// saved with one, else the caller's; the header still goes only to a caller with a token.
fn results_filter(
    server: &Server,
    caller: &Option<Authz>,
    stored_token: &str,
) -> Result<RowFilter, String> {
    let filter = rows(caller);
    if caller.is_none() || stored_token.is_empty() {
        return Ok(filter);
    }
    match authorize(server, stored_token)? {
        Some(stored) => Ok(filter.judged_by(&stored)),
        None => Ok(filter),
    }
}

/// `PreparedQuery.Apply`: creates (a new ID, answered), updates or deletes one query.
pub async fn apply(server: &Server, call: &TypedCall) -> Answer {
    let request = QueryRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    let ctx = server.context();
    let version = ctx.current_version();
    let mut query = request.query;
    // The query being replaced or deleted must be writable too.
    if request.op != "create" {
        let existing = query::get(&version, &query.id);
        if let Some(prefix) = existing.as_ref().and_then(|q| q.acl_prefix()) {
            require(&authz, |a| a.query_write(prefix))?;
        }
    }
    let command = match request.op {
        "create" | "update" => {
            if let Some(prefix) = query.acl_prefix() {
                require(&authz, |a| a.query_write(prefix))?;
            }
            crate::consul::query::validate(&query)
                .map_err(|e| format!("Invalid prepared query: {e}"))?;
            let create = request.op == "create";
            if create {
                if !query.id.is_empty() {
                    return Err("ID must be empty when creating a new prepared query".to_string());
                }
                query.id = loop {
                    let id = uuid::Uuid::new_v4().to_string();
                    if query::get(&version, &id).is_none() {
                        break id;
                    }
                };
            }
            Command::Query(QueryOp::Set {
                query: Box::new(query.clone()),
                create,
            })
        }
        "delete" => Command::Query(QueryOp::Delete {
            id: query.id.clone(),
        }),
        other => return Err(format!("Unknown prepared query operation: {other}")),
    };
    drop(version);
    match propose_typed::<QueryResult>(server, command).await? {
        QueryResult::Refused(reason) => Err(reason),
        QueryResult::Written => {
            let mut w = crate::proto::msgpack::Writer::new();
            w.str(&query.id);
            Ok(w.into_inner())
        }
    }
}

struct One {
    id: Arc<str>,
    show_tokens: bool,
}

impl Read for One {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            query::queries_index(tables),
            WatchSet::new().key(Table::PreparedQueries, self.id.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let found = query::get(version, &self.id).ok_or(query::QUERY_NOT_FOUND)?;
        let show_tokens = self.show_tokens;
        Ok(write_indexed_queries(meta, &[found.as_ref()], |q| {
            token_shown(q, show_tokens)
        }))
    }
}

/// `PreparedQuery.Get`: one query by ID, `query:read` on its name when it has one.
pub async fn get(server: &Server, call: &TypedCall) -> Answer {
    let request = SpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let version = server.context().current_version();
    let existing = query::get(&version, request.query_id);
    if let Some(prefix) = existing.as_ref().and_then(|q| q.acl_prefix()) {
        require(&authz, |a| a.query_read(prefix))?;
    }
    drop(version);
    let one = One {
        id: Arc::from(request.query_id),
        show_tokens: shows_tokens(&authz),
    };
    read(server, call, &request.options, one).await
}

struct All {
    show_tokens: bool,
    rows: RowFilter,
}

impl Read for All {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            query::queries_index(tables),
            WatchSet::new().table(Table::PreparedQueries),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut queries: Vec<&PreparedQuery> = query::list(version).map(|q| &**q).collect();
        let hidden = self.rows.retain(&mut queries, |filter, q| {
            filter.prepared_query(q.acl_prefix())
        });
        let show_tokens = self.show_tokens;
        Ok(write_indexed_queries(
            &meta.filtered(hidden),
            &queries,
            |q| token_shown(q, show_tokens),
        ))
    }
}

/// `PreparedQuery.List`: every query the token may read.
pub async fn list(server: &Server, call: &TypedCall) -> Answer {
    let request = DcSpecificRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let all = All {
        show_tokens: shows_tokens(&authz),
        rows: rows(&authz),
    };
    read(server, call, &request.options, all).await
}

/// `PreparedQuery.Explain`: the query an ID or name resolves to, rendered.
pub async fn explain(server: &Server, call: &TypedCall) -> Answer {
    let request = ExecuteRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    if let Some(answer) = one_shot_here(server, call, &request.options).await {
        return answer;
    }
    let ctx = server.context();
    let version = ctx.current_version();
    let resolved =
        query::resolve(&version, request.query_id_or_name, "")?.ok_or(query::QUERY_NOT_FOUND)?;
    if let Some(prefix) = resolved.acl_prefix() {
        require(&authz, |a| a.query_read(prefix))?;
    }
    let meta = super::rpc_meta_of(
        &ctx.query_meta(
            query::queries_index(&version),
            consistency(&request.options),
        ),
        false,
    );
    let shown = token_shown(&resolved, shows_tokens(&authz));
    Ok(write_explain_response(&meta, &resolved, shown))
}

/// `PreparedQuery.Execute`: resolves the query, selects, orders and limits its instances
/// here, and fails over to other datacenters when there are none.
pub async fn execute(server: &Server, call: &TypedCall) -> Answer {
    let request = ExecuteRequest::decode(&call.body).map_err(decode_error)?;
    let caller = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    if let Some(answer) = one_shot_here(server, call, &request.options).await {
        return answer;
    }
    let ctx = server.context();
    let version = ctx.current_version();
    let stored_token = http_query::stored_token(&version, request.query_id_or_name);
    let asked = Asked {
        filter: results_filter(server, &caller, &stored_token)?,
        id_or_name: request.query_id_or_name.to_string(),
        limit: request.limit.max(0) as usize,
        connect: request.connect,
        near: request.source.node.to_string(),
        agent_node: if request.agent.node.is_empty() {
            ctx.config().node_name.clone()
        } else {
            request.agent.node.to_string()
        },
        token: (!request.options.token.is_empty()).then(|| request.options.token.to_string()),
        consistency: consistency(&request.options),
    };
    let deferred = ctx.deferred();
    let step = http_query::run_locally(&deferred, &version, ctx.lan(), &asked);
    drop(version);
    match step {
        Ok(step) => Ok(step.finish(&deferred).await.encode()),
        Err(ended) => Err(ended.text()),
    }
}

struct Remote {
    query: PreparedQuery,
    filter: RowFilter,
    limit: usize,
    connect: bool,
    datacenter: String,
}

impl Read for Remote {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        let service = &self.query.service.service;
        (
            crate::store::catalog::read::service_index(tables, service),
            WatchSet::new().key(
                Table::ServiceIndex,
                Arc::from(&*crate::store::catalog::rows::fold(service)),
            ),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let mut rows = select(version, &self.query.service, self.connect);
        let hidden = http_query::hide_unreadable(&self.filter, &mut rows);
        // No distance sort in another datacenter: a shuffle spreads the load.
        http_query::order(&mut rows, version, None, "", self.limit);
        let execution = Execution {
            service: &self.query.service.service,
            dns_ttl: &self.query.dns_ttl,
            datacenter: &self.datacenter,
            failovers: 0,
        };
        Ok(write_execute_response(
            &meta.filtered(hidden),
            &execution,
            &rows,
        ))
    }
}

/// `PreparedQuery.ExecuteRemote`: another datacenter's query, run here without failing
/// over further.
pub async fn execute_remote(server: &Server, call: &TypedCall) -> Answer {
    let request = ExecuteRemoteRequest::decode(&call.body).map_err(decode_error)?;
    let caller = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let remote = Remote {
        filter: results_filter(server, &caller, &request.query.token)?,
        limit: request.limit.max(0) as usize,
        connect: request.connect,
        datacenter: server.context().config().datacenter.clone(),
        query: request.query,
    };
    read(server, call, &request.options, remote).await
}
