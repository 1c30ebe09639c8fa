//! `ConfigEntry.Apply`, `.Delete`, `.Get`, `.List` and `.ListAll`, as Consul's
//! `config_endpoint.go` serves them, from the pieces `/v1/config` uses (`api::config`):
//! an applied entry is decoded, normalized and validated as a `PUT /v1/config` body is, and
//! checked with the same rule ([`can_write`], the discovery-chain entries' related
//! services included); reads block on the entry's key or the kind's prefix and answer what
//! the token may read ([`config_entry_read`]), a list leaving the others out.

use super::{
    authorize, decode_error, elsewhere, propose, read, read_here, require, rows, Answer, Placement,
    Read,
};
use crate::api::authz::{config_entry_read, RowFilter};
use crate::api::config::{can_write, delete_name, entry_read, list_read, related_services_of};
use crate::api::server::Server;
use crate::consul::config_entry;
use crate::consul::rpc::config_entry::{
    write_delete_response, write_entry_response, write_generic_entries, write_indexed_entries,
    ConfigEntryListAllRequest, ConfigEntryQuery, ConfigEntryRequest, LIST_ALL_DEFAULT_KINDS,
};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::mesh::config_entry::{self as entries, ConfigEntry, ConfigEntryOp, ConfigKind};
use crate::store::{Command, CommandResult, StoreVersion, Tables};
use std::sync::Arc;

fn kind_of(text: &str) -> Result<ConfigKind, String> {
    ConfigKind::parse(text).ok_or_else(|| format!("invalid config entry kind: {text}"))
}

/// The result of a config entry's store command.
fn applied(result: CommandResult) -> Result<bool, String> {
    match result {
        CommandResult::Bool(done) => Ok(done),
        CommandResult::Error(reason) => Err(reason),
        other => Err(format!(
            "unexpected result of a config entry write: {other:?}"
        )),
    }
}

/// `ConfigEntry.Apply`: an upsert (`upsert-cas` when the entry's `ModifyIndex` must still
/// be the stored one); answers whether it was written.
pub async fn apply(server: &Server, call: &TypedCall) -> Answer {
    let request = ConfigEntryRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    let entry = config_entry::decode(&request.entry).map_err(|e| e.message().to_string())?;
    let related = related_services_of(&entry);
    require(&authz, |a| can_write(a, entry.kind, &entry.name, &related))?;
    // Consul treats any other operation as a plain upsert.
    let cas = (request.op == "upsert-cas").then(|| request.cas_index());
    let command = Command::ConfigEntry(ConfigEntryOp::Set {
        entry: Box::new(entry),
        cas,
    });
    let done = applied(propose(server, command).await?)?;
    let mut w = Writer::new();
    w.bool(done);
    Ok(w.into_inner())
}

/// `ConfigEntry.Delete` (`delete-cas` when the entry's `ModifyIndex` must still be the
/// stored one); answers `ConfigEntryDeleteResponse`.
pub async fn delete(server: &Server, call: &TypedCall) -> Answer {
    let request = ConfigEntryRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    let kind = kind_of(request.kind)?;
    let name = delete_name(kind, request.name())?;
    require(&authz, |a| can_write(a, kind, &name, &[]))?;
    let cas = (request.op == "delete-cas").then(|| request.cas_index());
    let command = Command::ConfigEntry(ConfigEntryOp::Delete { kind, name, cas });
    let deleted = applied(propose(server, command).await?)?;
    Ok(write_delete_response(deleted))
}

struct One {
    kind: ConfigKind,
    name: String,
    key: Arc<str>,
}

impl Read for One {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        entry_read(tables, &self.key)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let entry = entries::get(version, self.kind, &self.name);
        Ok(write_entry_response(meta, entry.map(|e| &**e)))
    }
}

/// `ConfigEntry.Get`: one entry, or none (`Entry` nil), with the kind's read rule.
pub async fn get(server: &Server, call: &TypedCall) -> Answer {
    let request = ConfigEntryQuery::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let kind = kind_of(request.kind)?;
    require(&authz, |a| config_entry_read(a, kind, request.name))?;
    let query = One {
        kind,
        name: request.name.to_string(),
        key: Arc::from(entries::entry_key(kind, request.name).as_str()),
    };
    read(server, call, &request.options, query).await
}

/// The entries of the kinds asked for that the token may read, and whether any was hidden.
fn visible<'v>(
    version: &'v StoreVersion,
    kinds: Option<&[ConfigKind]>,
    rows: &RowFilter,
) -> (Vec<&'v ConfigEntry>, bool) {
    let mut found: Vec<&ConfigEntry> = match kinds {
        Some([kind]) => entries::list(version, *kind).map(|e| &**e).collect(),
        Some(kinds) => entries::all(version)
            .filter(|e| kinds.contains(&e.kind))
            .map(|e| &**e)
            .collect(),
        None => entries::all(version).map(|e| &**e).collect(),
    };
    let hidden = rows.retain(&mut found, |rows, e| rows.config_entry(e.kind, &e.name));
    (found, hidden)
}

struct OfKind {
    kind: ConfigKind,
    rows: RowFilter,
}

impl Read for OfKind {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        list_read(tables, Some(self.kind))
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (found, hidden) = visible(version, Some(&[self.kind]), &self.rows);
        Ok(write_indexed_entries(
            &meta.filtered(hidden),
            self.kind,
            &found,
        ))
    }
}

/// `ConfigEntry.List`: the entries of one kind the token may read.
pub async fn list(server: &Server, call: &TypedCall) -> Answer {
    let request = ConfigEntryQuery::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let kind = kind_of(request.kind)?;
    let query = OfKind {
        kind,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

struct OfKinds {
    kinds: Vec<ConfigKind>,
    rows: RowFilter,
}

impl Read for OfKinds {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        list_read(tables, None)
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (found, hidden) = visible(version, Some(&self.kinds), &self.rows);
        Ok(write_generic_entries(&meta.filtered(hidden), &found))
    }
}

/// `ConfigEntry.ListAll`: the entries of the kinds named (Consul 1.8's kinds when none
/// are) that the token may read, in the order `GET /v1/config/` lists them.
pub async fn list_all(server: &Server, call: &TypedCall) -> Answer {
    let request = ConfigEntryListAllRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let kinds = if request.kinds.is_empty() {
        LIST_ALL_DEFAULT_KINDS.to_vec()
    } else {
        let mut kinds = Vec::with_capacity(request.kinds.len());
        for text in &request.kinds {
            kinds.push(kind_of(text)?);
        }
        kinds
    };
    let query = OfKinds {
        kinds,
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}
