//! `KVS.Get`, `KVS.List`, `KVS.ListKeys` and `KVS.Apply`, as Consul's `kvs_endpoint.go`
//! serves them: a missing key answers no entries at the table's index, a denied key
//! "Permission denied", lists leave out the keys the token may not read.

use super::{
    authorize, decode_error, elsewhere, propose_typed, read, read_here, require, rows, Answer,
    Placement, Read,
};
use crate::api::kv::KEY_BYTES_MAX;
use crate::api::server::Server;
use crate::consul::rpc::kvs::{
    write_indexed_dir_entries, write_indexed_key_list, KeyListRequest, KeyRequest, KvsRequest,
};
use crate::consul::rpc::QueryMeta;
use crate::proto::msgpack::Writer;
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::kv::{self, KvOp};
use crate::store::{Command, KvResult, StoreVersion, Table, Tables};
use std::sync::Arc;

struct GetKey {
    key: Arc<str>,
}

impl Read for GetKey {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            kv::get(tables, &self.key).0,
            WatchSet::new().key(Table::Kvs, self.key.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let entry = kv::get(version, &self.key).1.map(|row| row.fields());
        let mut w = Writer::new();
        write_indexed_dir_entries(&mut w, meta, entry.as_slice());
        Ok(w.into_inner())
    }
}

/// `KVS.Get`.
pub async fn get(server: &Server, call: &TypedCall) -> Answer {
    let request = KeyRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    require(&authz, |a| a.key_read(request.key))?;
    let query = GetKey {
        key: Arc::from(request.key),
    };
    read(server, call, &request.options, query).await
}

struct ListPrefix {
    prefix: Arc<str>,
    rows: crate::api::authz::RowFilter,
}

impl Read for ListPrefix {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            kv::list(tables, &self.prefix).0,
            WatchSet::new().prefix(Table::Kvs, self.prefix.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (_, mut entries) = kv::list(version, &self.prefix);
        let hidden = self.rows.retain(&mut entries, |rows, e| rows.key(e.key()));
        let fields: Vec<_> = entries.into_iter().map(|row| row.fields()).collect();
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        write_indexed_dir_entries(&mut w, &meta, &fields);
        Ok(w.into_inner())
    }
}

/// `KVS.List`.
pub async fn list(server: &Server, call: &TypedCall) -> Answer {
    let request = KeyRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = ListPrefix {
        prefix: Arc::from(request.key),
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

struct ListKeys {
    prefix: Arc<str>,
    separator: Arc<str>,
    rows: crate::api::authz::RowFilter,
}

impl Read for ListKeys {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            kv::keys(tables, &self.prefix, &self.separator).0,
            WatchSet::new().prefix(Table::Kvs, self.prefix.clone()),
        )
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let (_, mut keys) = kv::keys(version, &self.prefix, &self.separator);
        let hidden = self.rows.retain(&mut keys, |rows, k| rows.key(k));
        let keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
        let meta = meta.filtered(hidden);
        let mut w = Writer::new();
        write_indexed_key_list(&mut w, &meta, &keys);
        Ok(w.into_inner())
    }
}

/// `KVS.ListKeys`.
pub async fn list_keys(server: &Server, call: &TypedCall) -> Answer {
    let request = KeyListRequest::decode(&call.body).map_err(decode_error)?;
    let authz = match read_here(server, call, request.datacenter, &request.options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let query = ListKeys {
        prefix: Arc::from(request.prefix),
        separator: Arc::from(request.separator),
        rows: rows(&authz),
    };
    read(server, call, &request.options, query).await
}

/// `KVS.Apply`: `true` or `false` for the operations whose outcome Consul's state store
/// reports (cas, delete-cas, lock, unlock), `false` for the others.
pub async fn apply(server: &Server, call: &TypedCall) -> Answer {
    let request = KvsRequest::decode(&call.body).map_err(decode_error)?;
    if let Some(answer) = elsewhere(server, call, request.datacenter, Placement::Leader, None).await
    {
        return answer;
    }
    let authz = authorize(server, request.token)?;
    let key = request.entry.key;
    if key.is_empty() && request.op != "delete-tree" {
        return Err("Must provide key".to_string());
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(format!("Key exceeds {KEY_BYTES_MAX} bytes"));
    }
    let max_value = server.context().config().kv_max_value_size;
    if request.entry.value.len() > max_value {
        return Err(format!(
            "Value exceeds {max_value} byte limit ({} bytes)",
            request.entry.value.len()
        ));
    }
    let op = request.operation()?;
    match &op {
        KvOp::DeleteTree { prefix } => require(&authz, |a| a.key_write_prefix(prefix))?,
        _ => require(&authz, |a| a.key_write(key))?,
    }
    let outcome = match propose_typed(server, Command::Kv(op)).await? {
        KvResult::Refused(reason) => return Err(reason),
        result => request.replies_outcome() && result.took_effect(),
    };
    let mut w = Writer::new();
    w.bool(outcome);
    Ok(w.into_inner())
}
