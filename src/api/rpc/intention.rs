//! `Intention.Apply`, `.Get`, `.List`, `.Match` and `.Check`, as Consul's
//! `intention_endpoint.go` serves them, from the pieces `/v1/connect/intentions` uses
//! (`api::intentions`): a write is decided by the same `plan_*` functions against the
//! leader's store (the same checks, words and store command) after the same
//! `intentions:write` rule on its destination; reads are the handler's queries — the same
//! watches, the same ACL rules (`intentions:read` on the destination, `service:read` for a
//! check), a list leaving out what the token may not read — with their rows written as
//! Consul's `Intention`s (`consul::rpc::intention`). A server with Connect off refuses
//! them in Consul's words.

use super::{
    authorize, decode_error, elsewhere, error_text, propose, read, read_here, require, rows,
    Answer, Placement, Read,
};
use crate::api::intentions::{
    default_allow, list_filter, plan_create, plan_delete, plan_delete_exact, plan_update,
    plan_upsert, require_connect, write_target, CheckQuery, ExactQuery, Found, IdQuery, ListQuery,
    MatchQuery, NOT_FOUND,
};
use crate::api::server::Server;
use crate::api::Query;
use crate::consul::config_entry::intention::decode_legacy;
use crate::consul::rpc::intention::{
    write_check_response, write_indexed_intentions, write_matches, Intention, IntentionListRequest,
    IntentionQueryRequest, IntentionRequest,
};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::mesh::config_entry::ConfigEntryOp;
use crate::store::{Command, CommandResult, StoreVersion, Tables};

/// Consul's refusal when Connect is off on this server.
fn connect_enabled(server: &Server) -> Result<(), String> {
    require_connect(server.context()).map_err(|e| error_text(&e))
}

fn wire<'t>(found: &[Found<'t>]) -> Vec<Intention<'t>> {
    found
        .iter()
        .map(|(entry, source)| Intention::of(entry, source))
        .collect()
}

/// `Intention.Apply`: `create` (answers the new ID), `update` (by `ID`), `upsert` (by
/// source and destination) or `delete` (by `ID`, else by source and destination; nothing
/// to delete by name is no write).
pub async fn apply(server: &Server, call: &TypedCall) -> Answer {
    let request = IntentionRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    connect_enabled(server)?;
    let authz = authorize(server, request.token)?;
    let Some(given) = &request.intention else {
        return Err("Intention is required".to_string());
    };
    let ixn =
        decode_legacy(&given.body_fields()).map_err(|e| format!("Request decode failed: {e}"))?;
    let ctx = server.context();
    let by_id = matches!(request.op, "update" | "delete") && !ixn.id.is_empty();
    let planned = {
        let version = ctx.current_version();
        let id = if by_id { ixn.id.as_str() } else { "" };
        if let Some(destination) = write_target(&version, id, &ixn.destination_name) {
            require(&authz, |a| a.intention_write(&destination))?;
        }
        let now_ns = crate::api::context::now_unix_ns();
        let planned = match request.op {
            "create" => Some(plan_create(&version, &ixn, now_ns)),
            "update" => Some(plan_update(&version, &ixn.id, &ixn, now_ns)),
            "upsert" => Some(plan_upsert(&version, ixn.clone())),
            "delete" if by_id => Some(plan_delete(&version, &ixn.id)),
            "delete" => {
                plan_delete_exact(&version, &ixn.source_name, &ixn.destination_name).map(Ok)
            }
            other => return Err(format!("Invalid Intention operation {other:?}")),
        };
        planned.transpose().map_err(|e| error_text(&e))?
    };
    let id = match planned {
        None => String::new(),
        Some(planned) => {
            let command = Command::ConfigEntry(ConfigEntryOp::Intention(planned.op));
            match propose(server, command).await? {
                CommandResult::Bool(_) => planned.id,
                CommandResult::Error(reason) => return Err(reason),
                other => {
                    return Err(format!(
                        "unexpected result of an intention write: {other:?}"
                    ))
                }
            }
        }
    };
    let mut w = Writer::new();
    w.str(&id);
    Ok(w.into_inner())
}

/// A read answering one intention (`Intention.Get`); Consul's error when there is none.
enum One {
    Exact(ExactQuery),
    Id(IdQuery),
}

impl Read for One {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        match self {
            One::Exact(query) => query.evaluate(tables),
            One::Id(query) => query.evaluate(tables),
        }
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let found = match self {
            One::Exact(query) => query.found(version),
            One::Id(query) => query.found(version)?,
        };
        match found {
            Some(found) => Ok(write_indexed_intentions(meta, &wire(&[found]))),
            None => Err(NOT_FOUND.to_string()),
        }
    }
}

/// `Intention.Get`: by `IntentionID` (its destination's `intentions:read`, checked once
/// found) or by `Exact` source and destination.
pub async fn get(server: &Server, call: &TypedCall) -> Answer {
    let request = IntentionQueryRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    connect_enabled(server)?;
    let query = match &request.exact {
        Some(exact) => {
            require(&authz, |a| a.intention_read(exact.destination_name))?;
            One::Exact(ExactQuery::new(
                exact.source_name.to_string(),
                exact.destination_name.to_string(),
            ))
        }
        None if !request.intention_id.is_empty() => One::Id(IdQuery {
            id: request.intention_id.to_string(),
            acl: authz.as_ref().map(|a| a.authorizer.clone()),
        }),
        None => return Err("Intention ID or Exact source and destination must be set".into()),
    };
    read(server, call, &request.options, query).await
}

struct List(ListQuery);

impl Read for List {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        self.0.evaluate(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (found, hidden) = self.0.listed(version);
        Ok(write_indexed_intentions(
            &meta.filtered(hidden),
            &wire(&found),
        ))
    }
}

/// `Intention.List`: every intention the token may read that `Filter` keeps.
pub async fn list(server: &Server, call: &TypedCall) -> Answer {
    let request = IntentionListRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    connect_enabled(server)?;
    let filter = list_filter(Some(request.options.filter)).map_err(|e| error_text(&e))?;
    let query = List(ListQuery {
        rows: rows(&authz),
        filter,
    });
    read(server, call, &request.options, query).await
}

struct Matches(MatchQuery);

impl Read for Matches {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        self.0.evaluate(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let found: Vec<Vec<Intention>> = self.0.found(version).iter().map(|f| wire(f)).collect();
        Ok(write_matches(meta, &found))
    }
}

/// `Intention.Match`: for each entry's name, the intentions that apply to it by source or
/// by destination; `intentions:read` on every name.
pub async fn match_intentions(server: &Server, call: &TypedCall) -> Answer {
    let request = IntentionQueryRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    connect_enabled(server)?;
    let Some(matching) = &request.matching else {
        return Err("Match must be set".to_string());
    };
    let by_destination = match matching.kind {
        "source" => false,
        "destination" => true,
        _ => return Err("'by' parameter must be one of 'source' or 'destination'".to_string()),
    };
    for name in &matching.names {
        require(&authz, |a| a.intention_read(name))?;
    }
    let names = matching
        .names
        .iter()
        .map(|name| (name.to_string(), name.to_string()))
        .collect();
    let query = Matches(MatchQuery {
        by_destination,
        names,
    });
    read(server, call, &request.options, query).await
}

struct Checked(CheckQuery);

impl Read for Checked {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        self.0.evaluate(tables)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        Ok(write_check_response(meta, self.0.allowed(version)))
    }
}

/// `Intention.Check`: whether the source may connect to the destination (the ACL default
/// policy when no intention matches); `service:read` on the destination.
pub async fn check(server: &Server, call: &TypedCall) -> Answer {
    let request = IntentionQueryRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    connect_enabled(server)?;
    let Some(check) = &request.check else {
        return Err("Check must be set".to_string());
    };
    require(&authz, |a| a.service_read(check.destination_name))?;
    let query = Checked(CheckQuery::new(
        check.source_name.to_string(),
        check.destination_name.to_string(),
        default_allow(server.context()),
    ));
    read(server, call, &request.options, query).await
}
