//! A client agent's prepared queries as Consul's typed calls: `GET /v1/query` is
//! `PreparedQuery.List`, `GET /v1/query/<id>` `PreparedQuery.Get`, `/explain`
//! `PreparedQuery.Explain`, `/execute` `PreparedQuery.Execute`, and the writes
//! (`POST /v1/query`, `PUT` and `DELETE /v1/query/<id>`) `PreparedQuery.Apply`, as Consul's
//! `prepared_query_endpoint.go` on the agent sends them.
//!
//! The agent decodes and validates a written query as a server's endpoint does, so a bad
//! body is refused here in the same words; the server checks the ACL rules, makes a new
//! query's ID and answers it. The replies are rendered by the server's own functions
//! (`api::query`), so the bodies are a server's; the headers come from the reply's
//! `QueryMeta`. A query that does not exist is a 404 with Consul's words, as on a server.

use super::client::{bad_reply, call_mapped, error_of, query_options, read_timeout, write_in};
use super::client_catalog::headers;
use crate::api::authz::request_secret;
use crate::api::query::{write_explanation, Executed};
use crate::api::{ApiError, Context, Outcome, Reply, Request};
use crate::cluster::servers::Retry;
use crate::consul::query::QueryJson;
use crate::consul::rpc::catalog::DcSpecificRequest;
use crate::consul::rpc::prepared_query::{
    read_execute_response, read_explain_response, read_indexed_queries, ExecuteRequest,
    QueryRequest, QuerySource, SpecificRequest,
};
use crate::shard::rpc_client::CallError;
use crate::store::query::{PreparedQuery, QUERY_NOT_FOUND};

/// A failed read: Consul's "Query not found" is a 404, as a server answers it.
fn read_error(error: CallError) -> ApiError {
    match &error {
        CallError::Remote(text) if text == QUERY_NOT_FOUND => {
            ApiError::NotFound(QUERY_NOT_FOUND.to_string())
        }
        _ => error_of(error),
    }
}

/// Answers queries as the list a server's `GET /v1/query` answers.
fn queries_answer(body: &[u8], secret: &str, reply: &mut Reply) -> Result<(), ApiError> {
    let (meta, queries) = read_indexed_queries(body).map_err(bad_reply)?;
    let rows: Vec<QueryJson> = queries
        .iter()
        .map(|query| QueryJson {
            query,
            // The server already hid what the token may not see.
            token: &query.token,
        })
        .collect();
    reply.json(200, &headers(&meta, secret), &rows);
    Ok(())
}

/// `GET /v1/query`: `PreparedQuery.List` in `datacenter` (empty: this one).
pub fn list(
    ctx: &Context,
    request: &Request,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = DcSpecificRequest {
        datacenter,
        node_meta_filters: Vec::new(),
        options: query_options(&options, &secret),
    }
    .encode();
    call_mapped(
        ctx,
        datacenter,
        "PreparedQuery.List",
        body,
        read_timeout(&options),
        Retry::Always,
        error_of,
        move |body, reply| queries_answer(body, &secret, reply),
    )
}

/// `GET /v1/query/<id>`: `PreparedQuery.Get` in `datacenter` (empty: this one).
pub fn get(
    ctx: &Context,
    request: &Request,
    id: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = SpecificRequest {
        datacenter,
        query_id: id,
        options: query_options(&options, &secret),
    }
    .encode();
    call_mapped(
        ctx,
        datacenter,
        "PreparedQuery.Get",
        body,
        read_timeout(&options),
        Retry::Always,
        read_error,
        move |body, reply| queries_answer(body, &secret, reply),
    )
}

/// The execute request of `/execute` and `/explain` in `datacenter` (empty: this one):
/// the name, `?limit`, `?connect`, `?near` and this agent as `_agent` (both in this agent's
/// datacenter, as Consul's agent fills `Source` and `Agent`).
fn execute_request<'a>(
    ctx: &'a Context,
    request: &'a Request,
    id_or_name: &'a str,
    limit: usize,
    options: crate::consul::rpc::QueryOptions<'a>,
    datacenter: &'a str,
) -> ExecuteRequest<'a> {
    let config = ctx.config();
    ExecuteRequest {
        datacenter,
        query_id_or_name: id_or_name,
        limit: limit as i64,
        connect: request.query.has("connect"),
        source: QuerySource {
            datacenter: &config.datacenter,
            node: request.query.get("near").unwrap_or(""),
            ..QuerySource::default()
        },
        agent: QuerySource {
            datacenter: &config.datacenter,
            node: &config.node_name,
            ..QuerySource::default()
        },
        options,
    }
}

/// `GET /v1/query/<id|name>/execute`: `PreparedQuery.Execute` in `datacenter` (empty:
/// this one).
pub fn execute(
    ctx: &Context,
    request: &Request,
    id_or_name: &str,
    limit: usize,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = execute_request(
        ctx,
        request,
        id_or_name,
        limit,
        query_options(&options, &secret),
        datacenter,
    )
    .encode();
    call_mapped(
        ctx,
        datacenter,
        "PreparedQuery.Execute",
        body,
        super::client::CALL_TIMEOUT + crate::api::query::FAILOVER_TIMEOUT,
        Retry::Always,
        read_error,
        move |body, reply| {
            let remote = read_execute_response(body).map_err(bad_reply)?;
            let executed = Executed {
                meta: super::client::meta_of(&remote.meta),
                hidden: remote.meta.results_filtered_by_acls,
                service: remote.service,
                dns_ttl: remote.dns_ttl,
                datacenter: remote.datacenter,
                failovers: remote.failovers,
                rows: remote.nodes,
            };
            executed.respond(reply, !secret.is_empty());
            Ok(())
        },
    )
}

/// `GET /v1/query/<id|name>/explain`: `PreparedQuery.Explain` in `datacenter` (empty:
/// this one).
pub fn explain(
    ctx: &Context,
    request: &Request,
    id_or_name: &str,
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request).into_owned();
    let body = execute_request(
        ctx,
        request,
        id_or_name,
        0,
        query_options(&options, &secret),
        datacenter,
    )
    .encode();
    call_mapped(
        ctx,
        datacenter,
        "PreparedQuery.Explain",
        body,
        read_timeout(&options),
        Retry::Always,
        read_error,
        move |body, reply| {
            let (meta, query) = read_explain_response(body).map_err(bad_reply)?;
            let meta = super::client::meta_of(&meta);
            let mut body = Vec::with_capacity(512);
            // The server already hid the token if the caller may not see it.
            write_explanation(&mut body, reply.pretty, &query, true, meta);
            let mut headers = Vec::with_capacity(160);
            meta.write_headers(&mut headers);
            reply.json_bytes(200, &headers, &body);
            Ok(())
        },
    )
}

/// What a query write does.
pub enum Apply {
    /// `POST /v1/query`: the server makes the ID and the answer carries it.
    Create,
    /// `PUT /v1/query/<id>`.
    Update,
    /// `DELETE /v1/query/<id>`.
    Delete,
}

/// A query write: `PreparedQuery.Apply` in `datacenter` (empty: this one), sent once (a
/// create that may have reached a server is not sent again: it could make two).
pub fn apply(
    ctx: &Context,
    request: &Request,
    op: Apply,
    query: &PreparedQuery,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let (name, create) = match op {
        Apply::Create => ("create", true),
        Apply::Update => ("update", false),
        Apply::Delete => ("delete", false),
    };
    let body = QueryRequest {
        datacenter,
        op: name,
        query: query.clone(),
        token: &secret,
    }
    .encode();
    write_in(
        ctx,
        datacenter,
        "PreparedQuery.Apply",
        body,
        move |body, reply| {
            if create {
                let id = crate::proto::msgpack::Reader::new(body)
                    .str()
                    .map_err(bad_reply)?;
                reply.json(200, b"", &serde_json::json!({ "ID": id }));
            } else {
                reply.send(200, None, b"", b"");
            }
            Ok(())
        },
    )
}

/// The prepared-query requests that name another datacenter (`?dc=`), as their typed calls
/// naming it ([`super::client::across_datacenters`]), parsed and checked by the handlers
/// (`api::query`) as for this datacenter; `None` for other paths.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    if request.path != "/v1/query" && !request.path.starts_with("/v1/query/") {
        return None;
    }
    Some(crate::api::query::across(ctx, request, datacenter))
}
