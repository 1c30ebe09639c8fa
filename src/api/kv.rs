//! `/v1/kv/<key>`: get, list, keys, put, CAS, lock acquire/release, delete, recursive delete —
//! Consul's KV API.

use super::authz::RowFilter;
use super::{
    query_options, run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request, WriteOp,
};
use crate::consul::json::JsonWriter;
use crate::proto::http::{Method, QueryParams};
use crate::shard::watch::WatchSet;
use crate::store::kv::{self, KvFields, KvOp, KvRow};
use crate::store::{KvResult, StoreVersion, Table, Tables};
use bytes::Bytes;
use std::sync::Arc;

/// Longest KV key accepted; Consul's effective limit comes from the request line, this makes
/// it explicit.
pub const KEY_BYTES_MAX: usize = 16 * 1024;

/// `/v1/kv/<key>` (and `/v1/kv`, whose key is empty): the request's `rest` is the key.
pub fn handle(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    let key = request.rest;
    check_key(key)?;
    match request.method {
        Method::Get => get(ctx, request, key, reply),
        Method::Put => put(ctx, request, key),
        Method::Delete => delete(ctx, request, key),
        _ => unreachable!("the router admits only GET, PUT and DELETE"),
    }
}

/// A key's limits: [`KEY_BYTES_MAX`], and no traversal sequence (newer Consul refuses
/// them; so do we).
pub(crate) fn check_key(key: &str) -> Result<(), ApiError> {
    if key.len() > KEY_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "Key exceeds {KEY_BYTES_MAX} bytes"
        )));
    }
    if key.contains("../") || key.contains("..\\") {
        return Err(ApiError::bad_request(
            "URL path contains invalid traversal sequence",
        ));
    }
    Ok(())
}

/// Consul answers 400 "Conflicting flags" when mutually exclusive parameters meet.
fn conflicting(request: &Request, flags: &[&str]) -> Result<(), ApiError> {
    if flags.iter().filter(|f| request.query.has(f)).count() > 1 {
        let raw = &request.buf[request.head.query.start as usize..request.head.query.end as usize];
        return Err(ApiError::bad_request(format!(
            "Conflicting flags: {}",
            String::from_utf8_lossy(raw)
        )));
    }
    Ok(())
}

fn parse_u64_param(request: &Request, name: &str) -> Result<Option<u64>, ApiError> {
    match request.query.get(name) {
        None => Ok(None),
        Some(text) => text.parse::<u64>().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "Invalid {name} value {text:?}: expected an unsigned integer"
            ))
        }),
    }
}

fn get(
    ctx: &Context,
    request: &Request,
    key: &str,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        // A client agent asks a server with Consul's typed call.
        return super::rpc::client::kv_get(ctx, request, key, options, "");
    }
    if request.query.has("keys") {
        let separator = separator(&request.query);
        return run_query(
            ctx,
            KeysQuery {
                prefix: Arc::from(key),
                separator: Arc::from(separator),
                rows: RowFilter::of(request),
            },
            options,
            reply,
        );
    }
    if request.query.has("recurse") {
        return run_query(
            ctx,
            ListQuery {
                prefix: Arc::from(key),
                rows: RowFilter::of(request),
            },
            options,
            reply,
        );
    }
    if key.is_empty() {
        return Err(ApiError::bad_request("Missing key name"));
    }
    run_query(
        ctx,
        GetQuery {
            key: Arc::from(key),
            raw: request.query.has("raw"),
        },
        options,
        reply,
    )
}

fn put(ctx: &Context, request: &Request, key: &str) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    put_in(request, key)
}

/// A PUT or DELETE naming another datacenter (`?dc=`): the write this handler makes, which
/// the caller sends there as its typed call (`KVS.Apply` naming that datacenter), parsed
/// and checked here first as Consul's agent does before its RPC.
pub(crate) fn write_elsewhere(request: &Request) -> Result<Outcome, ApiError> {
    check_key(request.rest)?;
    match request.method {
        Method::Put => put_in(request, request.rest),
        Method::Delete => delete_in(request, request.rest),
        _ => unreachable!("only writes go through here"),
    }
}

/// [`put`] whatever datacenter the request names.
fn put_in(request: &Request, key: &str) -> Result<Outcome, ApiError> {
    if key.is_empty() {
        return Err(ApiError::bad_request("Missing key name"));
    }
    conflicting(request, &["cas", "acquire", "release"])?;
    let flags = parse_u64_param(request, "flags")?.unwrap_or(0);
    let value = Bytes::copy_from_slice(request.body);
    let key = key.to_string();
    // Session IDs match case-insensitively in Consul's session index.
    let session_of = |name: &str| request.query.get(name).unwrap_or("").to_ascii_lowercase();
    let (op, is_set) = if request.query.has("acquire") {
        let session = session_of("acquire");
        (
            KvOp::Lock {
                key,
                value,
                flags,
                session,
            },
            false,
        )
    } else if request.query.has("release") {
        let session = session_of("release");
        (
            KvOp::Unlock {
                key,
                value,
                flags,
                session,
            },
            false,
        )
    } else {
        match parse_u64_param(request, "cas")? {
            Some(modify_index) => (
                KvOp::Cas {
                    key,
                    value,
                    flags,
                    modify_index,
                },
                false,
            ),
            None => (KvOp::Set { key, value, flags }, true),
        }
    };
    Ok(Outcome::Write(WriteOp::kv(
        op,
        move |result, reply| match result {
            KvResult::Refused(reason) => reply.error(&ApiError::Internal(reason)),
            // Consul answers `true` for a plain set whatever the store reports; CAS, acquire
            // and release answer whether they happened.
            result => reply.json_bool(result.took_effect() || is_set),
        },
    )))
}

fn delete(ctx: &Context, request: &Request, key: &str) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    delete_in(request, key)
}

/// [`delete`] whatever datacenter the request names.
fn delete_in(request: &Request, key: &str) -> Result<Outcome, ApiError> {
    conflicting(request, &["recurse", "cas"])?;
    let op = if request.query.has("recurse") {
        KvOp::DeleteTree {
            prefix: key.to_string(),
        }
    } else if key.is_empty() {
        return Err(ApiError::bad_request("Missing key name"));
    } else if let Some(modify_index) = parse_u64_param(request, "cas")? {
        KvOp::DeleteCas {
            key: key.to_string(),
            modify_index,
        }
    } else {
        KvOp::Delete {
            key: key.to_string(),
        }
    };
    let is_cas = matches!(op, KvOp::DeleteCas { .. });
    Ok(Outcome::Write(WriteOp::kv(
        op,
        move |result, reply| match result {
            KvResult::Refused(reason) => reply.error(&ApiError::Internal(reason)),
            result => reply.json_bool(result.took_effect() || !is_cas),
        },
    )))
}

/// Writes entries as Consul's `DirEntry` list.
pub(crate) fn write_entries<'e>(
    out: &mut Vec<u8>,
    pretty: bool,
    entries: impl Iterator<Item = KvFields<'e>>,
) {
    let mut w = JsonWriter::new(out, pretty);
    w.begin_array();
    for entry in entries {
        w.begin_object();
        w.field_u64("LockIndex", entry.lock_index);
        w.field_str("Key", entry.key);
        w.field_u64("Flags", entry.flags);
        w.field_base64_or_null("Value", entry.value);
        if let Some(session) = entry.session {
            w.field_str("Session", session);
        }
        w.field_u64("CreateIndex", entry.create_index);
        w.field_u64("ModifyIndex", entry.modify_index);
        w.end_object();
    }
    w.end_array();
    w.finish();
}

pub(crate) fn not_found(meta: QueryMeta, reply: &mut Reply) {
    not_found_filtered(meta, reply, &RowFilter::default(), false);
}

/// A 404 for a listing the token's filter may have emptied: it says so, as Consul's sets
/// the header before it answers an empty listing with a 404.
fn not_found_filtered(meta: QueryMeta, reply: &mut Reply, rows: &RowFilter, filtered: bool) {
    let mut headers = Vec::with_capacity(200);
    meta.write_headers(&mut headers);
    rows.write_header(filtered, &mut headers);
    reply.send(404, None, &headers, b"");
}

struct GetQuery {
    key: Arc<str>,
    raw: bool,
}

impl Query for GetQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            kv::get(tables, &self.key).0,
            WatchSet::new().key(Table::Kvs, self.key.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let Some(entry) = kv::get(tables, &self.key).1 else {
            return not_found(meta, reply);
        };
        let mut headers = Vec::with_capacity(192);
        meta.write_headers(&mut headers);
        if self.raw {
            headers.extend_from_slice(
                b"X-Content-Type-Options: nosniff\r\nContent-Security-Policy: sandbox\r\n",
            );
            reply.send(200, Some("text/plain"), &headers, entry.value());
            return;
        }
        let fields = entry.fields();
        let mut body = Vec::with_capacity(160 + fields.key.len() + fields.value.len() * 4 / 3);
        write_entries(&mut body, reply.pretty, std::iter::once(entry.fields()));
        reply.json_bytes(200, &headers, &body);
    }
}

struct ListQuery {
    prefix: Arc<str>,
    /// Entries the token cannot read are left out.
    rows: RowFilter,
}

impl Query for ListQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            kv::list(tables, &self.prefix).0,
            WatchSet::new().prefix(Table::Kvs, self.prefix.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let (_, mut entries) = kv::list(tables, &self.prefix);
        let filtered = self.rows.retain(&mut entries, |rows, e| rows.key(e.key()));
        if entries.is_empty() {
            return not_found_filtered(meta, reply, &self.rows, filtered);
        }
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        self.rows.write_header(filtered, &mut headers);
        let mut body = Vec::with_capacity(64 + entries.len() * 160);
        write_entries(
            &mut body,
            reply.pretty,
            entries.into_iter().map(KvRow::fields),
        );
        reply.json_bytes(200, &headers, &body);
    }
}

struct KeysQuery {
    prefix: Arc<str>,
    separator: Arc<str>,
    rows: RowFilter,
}

impl Query for KeysQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (
            kv::keys(tables, &self.prefix, &self.separator).0,
            WatchSet::new().prefix(Table::Kvs, self.prefix.clone()),
        )
    }

    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let (_, mut keys) = kv::keys(tables, &self.prefix, &self.separator);
        let filtered = self.rows.retain(&mut keys, |rows, k| rows.key(k));
        // Consul answers 404 for an empty listing except at the root, where it sends [].
        if keys.is_empty() && !self.prefix.is_empty() {
            return not_found_filtered(meta, reply, &self.rows, filtered);
        }
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        self.rows.write_header(filtered, &mut headers);
        reply.json_bytes(200, &headers, &keys_body(&keys, reply.pretty));
    }
}

/// `?keys`' `?separator` (also under Consul's old misspelling, `?seperator`), empty if none.
pub(crate) fn separator<'q>(query: &'q QueryParams) -> &'q str {
    query
        .get("separator")
        .or_else(|| query.get("seperator"))
        .unwrap_or("")
}

/// `?keys`' body: the keys as a JSON array.
pub(crate) fn keys_body(keys: &[&str], pretty: bool) -> Vec<u8> {
    let mut body = Vec::with_capacity(16 + keys.iter().map(|k| k.len() + 8).sum::<usize>());
    let mut w = JsonWriter::new(&mut body, pretty);
    w.begin_array();
    for key in keys {
        w.array_str(key);
    }
    w.end_array();
    w.finish();
    body
}
