//! `PUT /v1/txn`: Consul's transaction endpoint.
//!
//! The body is decoded into [`TxnOp`]s and pre-checked as Consul's `Txn.preCheck` does (known
//! verbs, a key, a node name, a service name with its ID); pre-check failures answer 409 with
//! `Errors` and never reach Raft. A transaction with a write becomes one Raft entry applied
//! atomically (`store::txn`); one made only of reads is answered from a store version under
//! the request's consistency mode (`?stale`, default, `?consistent`), without Raft, with the
//! `X-Consul-KnownLeader` and `X-Consul-LastContact` headers Consul sends for it.
//!
//! On a client agent the decoded operations are `Txn.Apply` or `Txn.Read` on a server
//! (`rpc::client_txn`), the answer rendered here.
//!
//! Answers: 200 with `Results` when the transaction committed, 409 with `Errors` (each with
//! `OpIndex` and `What`) when it rolled back, 413 for more than [`TXN_OPS_MAX`] operations or
//! an oversized value, 400 for a body that does not decode.

use super::rpc::client_txn;
use super::{
    query_options, run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request,
};
use crate::consul::bodies;
use crate::consul::body::{check_strict, parse_json, Kind, Obj};
use crate::consul::json::JsonWriter;
use crate::consul::registration::{parse_catalog_check, parse_service};
use crate::consul::render;
use crate::shard::watch::WatchSet;
use crate::store::catalog::Registration;
use crate::store::kv::KvEntry;
use crate::store::txn::{
    self, CatalogVerb, KvVerb, TxnError, TxnOp, TxnOutcome, TxnResult, TXN_OPS_MAX,
};
use crate::store::{StoreVersion, Tables, TxnAnswer};
use bytes::Bytes;
use serde_json::Value;

/// Why a request is refused before any operation runs.
enum Refusal {
    /// 400: the body does not decode.
    Decode(String),
    /// 413: too many operations, or a value over `kv_max_value_size`.
    TooLarge(String),
}

/// The decoded operations, with the pre-check failures found while decoding.
struct Decoded {
    ops: Vec<TxnOp>,
    errors: Vec<TxnError>,
}

fn decode_ops(body: &[u8], kv_value_max: usize, datacenter: &str) -> Result<Decoded, Refusal> {
    let value = parse_json(body).map_err(Refusal::Decode)?;
    let items = match &value {
        Value::Array(items) => items,
        Value::Object(map) if map.is_empty() => {
            return Err(Refusal::Decode("expected a list of operations".into()))
        }
        other => {
            return Err(Refusal::Decode(format!(
                "expected a list of operations, got {other}"
            )))
        }
    };
    check_strict(&value, Kind::ObjList(&bodies::TXN_OP)).map_err(Refusal::Decode)?;
    if items.len() > TXN_OPS_MAX {
        return Err(Refusal::TooLarge(format!(
            "Transaction contains too many operations ({} > {TXN_OPS_MAX})",
            items.len()
        )));
    }
    let mut decoded = Decoded {
        ops: Vec::with_capacity(items.len()),
        errors: Vec::new(),
    };
    for (op_index, item) in items.iter().enumerate() {
        let obj = Obj::new(item).map_err(Refusal::Decode)?;
        let (op, precheck) = decode_op(&obj, kv_value_max, datacenter)?;
        if let Some(what) = precheck {
            decoded.errors.push(TxnError { op_index, what });
        }
        decoded.ops.push(op);
    }
    Ok(decoded)
}

/// One operation, and the pre-check failure Consul would report for it.
fn decode_op(
    obj: &Obj,
    kv_value_max: usize,
    datacenter: &str,
) -> Result<(TxnOp, Option<String>), Refusal> {
    if let Some(kv) = obj.obj(&["kv"]).map_err(Refusal::Decode)? {
        return decode_kv_op(&kv, kv_value_max);
    }
    if let Some(node_op) = obj.obj(&["node"]).map_err(Refusal::Decode)? {
        return decode_node_op(&node_op, datacenter);
    }
    if let Some(service_op) = obj.obj(&["service"]).map_err(Refusal::Decode)? {
        return decode_service_op(&service_op);
    }
    if let Some(check_op) = obj.obj(&["check"]).map_err(Refusal::Decode)? {
        return decode_check_op(&check_op);
    }
    Err(Refusal::Decode(
        "each operation must be one of KV, Node, Service or Check".to_string(),
    ))
}

/// A `KV` operation: its value decoded from base64 and bounded by `kv_max_value_size`.
fn decode_kv_op(kv: &Obj, kv_value_max: usize) -> Result<(TxnOp, Option<String>), Refusal> {
    let decode = Refusal::Decode;
    let verb_text = kv.string(&["verb"]).map_err(decode)?;
    let key = kv.string(&["key"]).map_err(decode)?;
    let value = match kv.get(&["value"]) {
        None => Bytes::new(),
        Some(Value::String(text)) => {
            use base64::Engine;
            Bytes::from(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| Refusal::Decode(format!("failed to decode value: {e}")))?,
            )
        }
        Some(other) => return Err(Refusal::Decode(format!("unexpected value type: {other}"))),
    };
    if value.len() > kv_value_max {
        return Err(Refusal::TooLarge(format!(
            "Value for key {key:?} is too large ({} > {kv_value_max} bytes)",
            value.len()
        )));
    }
    let verb = KvVerb::parse(&verb_text);
    let precheck = match verb {
        None => Some(format!("unknown KV verb {verb_text:?}")),
        Some(v) if key.is_empty() && v != KvVerb::DeleteTree => {
            Some("Must provide key".to_string())
        }
        Some(_) => None,
    };
    let op = TxnOp::Kv {
        verb: verb.unwrap_or(KvVerb::Get),
        key,
        value,
        flags: kv.bounded(&["flags"], 0, i64::MAX).map_err(decode)? as u64,
        index: kv.bounded(&["index"], 0, i64::MAX).map_err(decode)? as u64,
        session: kv
            .string(&["session"])
            .map_err(decode)?
            .to_ascii_lowercase(),
    };
    Ok((op, precheck))
}

/// A `Node` operation: the node's registration, in this datacenter unless it names one.
fn decode_node_op(node_op: &Obj, datacenter: &str) -> Result<(TxnOp, Option<String>), Refusal> {
    let decode = Refusal::Decode;
    let verb_text = node_op.string(&["verb"]).map_err(decode)?;
    let node = node_op.obj(&["node"]).map_err(decode)?;
    let field = |name: &str| -> Result<String, Refusal> {
        match &node {
            Some(n) => n.string(&[name]).map_err(decode),
            None => Ok(String::new()),
        }
    };
    let mut registration = Registration {
        id: field("id")?.to_ascii_lowercase(),
        node: field("node")?,
        address: field("address")?,
        datacenter: field("datacenter")?,
        ..Default::default()
    };
    if registration.datacenter.is_empty() {
        registration.datacenter = datacenter.to_string();
    }
    let mut modify_index = 0;
    if let Some(n) = &node {
        registration.tagged_addresses = n.str_map(&["taggedaddresses"]).map_err(decode)?;
        registration.node_meta = n.str_map(&["meta"]).map_err(decode)?;
        modify_index = n.bounded(&["modifyindex"], 0, i64::MAX).map_err(decode)? as u64;
    }
    let verb = CatalogVerb::parse(&verb_text);
    let precheck = match verb {
        None => Some(format!("unknown node operation: {verb_text}")),
        Some(CatalogVerb::Get) => None,
        Some(_) if registration.node.is_empty() => Some("Must provide node".to_string()),
        Some(_)
            if !registration.id.is_empty() && uuid::Uuid::parse_str(&registration.id).is_err() =>
        {
            Some(format!(
                "Bad node ID: uuid string is wrong length or has invalid format: {:?}",
                registration.id
            ))
        }
        Some(_) => None,
    };
    let op = TxnOp::Node {
        verb: verb.unwrap_or(CatalogVerb::Get),
        registration,
        modify_index,
    };
    Ok((op, precheck))
}

/// A `Service` operation on a node's service.
fn decode_service_op(service_op: &Obj) -> Result<(TxnOp, Option<String>), Refusal> {
    let decode = Refusal::Decode;
    let verb_text = service_op.string(&["verb"]).map_err(decode)?;
    let node = service_op.string(&["node"]).map_err(decode)?;
    let (mut service, modify_index) = match service_op.obj(&["service"]).map_err(decode)? {
        Some(s) => (
            parse_service(&s).map_err(decode)?,
            s.bounded(&["modifyindex"], 0, i64::MAX).map_err(decode)? as u64,
        ),
        None => (Default::default(), 0),
    };
    let (verb, precheck) = txn::service_precheck(&verb_text, &node, &mut service);
    let op = TxnOp::Service {
        verb: verb.unwrap_or(CatalogVerb::Get),
        node,
        service,
        modify_index,
    };
    Ok((op, precheck))
}

/// A `Check` operation on a node's (or service's) check.
fn decode_check_op(check_op: &Obj) -> Result<(TxnOp, Option<String>), Refusal> {
    let decode = Refusal::Decode;
    let verb_text = check_op.string(&["verb"]).map_err(decode)?;
    let (check, modify_index) = match check_op.obj(&["check"]).map_err(decode)? {
        Some(c) => (
            parse_catalog_check(&c, "").map_err(decode)?,
            c.bounded(&["modifyindex"], 0, i64::MAX).map_err(decode)? as u64,
        ),
        None => (Default::default(), 0),
    };
    let verb = CatalogVerb::parse(&verb_text);
    let precheck = match verb {
        None => Some(format!("unknown check operation: {verb_text}")),
        Some(CatalogVerb::Get) => None,
        Some(_) if check.node.is_empty() => Some("Must provide node".to_string()),
        Some(_) => None,
    };
    let op = TxnOp::Check {
        verb: verb.unwrap_or(CatalogVerb::Get),
        check,
        modify_index,
    };
    Ok((op, precheck))
}

/// `PUT /v1/txn`.
pub fn handle(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    super::check_datacenter(ctx, &request.query)?;
    let decoded = match decode_request(ctx, request, &ctx.config().datacenter)? {
        Ok(decoded) => decoded,
        Err(refused) => {
            write_outcome(&refused, b"", reply);
            return Ok(Outcome::Done);
        }
    };
    let writes = decoded.ops.iter().any(TxnOp::is_write);
    if writes && ctx.writes_by_call() {
        return Ok(client_txn::apply(ctx, request, &decoded.ops, ""));
    }
    if writes {
        return Ok(Outcome::Write(super::WriteOp::txn(
            decoded.ops,
            |result, reply| match result {
                TxnAnswer::Ran(outcome) => write_outcome(&outcome, b"", reply),
                TxnAnswer::Refused(reason) => reply.error(&ApiError::Internal(reason)),
            },
        )));
    }
    let options = query_options(ctx, &request.query)?;
    if ctx.reads_by_call(&options) {
        return Ok(client_txn::read(ctx, request, &decoded.ops, options, ""));
    }
    run_query(ctx, ReadTxn { ops: decoded.ops }, options, reply)
}

/// The request's operations, decoded as a server's endpoint decodes them (a node operation
/// without a datacenter is in `home`); `Ok(Err(_))` when a pre-check refused some, which
/// is answered with their errors and without a call.
fn decode_request(
    ctx: &Context,
    request: &Request,
    home: &str,
) -> Result<Result<Decoded, TxnOutcome>, ApiError> {
    let decoded = match decode_ops(request.body, ctx.config().kv_max_value_size, home) {
        Ok(decoded) => decoded,
        Err(Refusal::Decode(reason)) => {
            return Err(ApiError::bad_request(format!(
                "Failed to parse body: {reason}"
            )))
        }
        Err(Refusal::TooLarge(reason)) => return Err(ApiError::TooLarge(reason)),
    };
    if !decoded.errors.is_empty() {
        return Ok(Err(TxnOutcome {
            results: Vec::new(),
            errors: decoded.errors,
        }));
    }
    Ok(Ok(decoded))
}

/// `PUT /v1/txn?dc=<other>`: decoded and pre-checked as for this datacenter, then
/// `Txn.Apply` (an operation writes) or `Txn.Read` naming `datacenter`.
pub(crate) fn across(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Result<Outcome, ApiError> {
    let decoded = match decode_request(ctx, request, datacenter)? {
        Ok(decoded) => decoded,
        Err(refused) => {
            return Ok(Outcome::Async(Box::pin(async move {
                Box::new(move |reply: &mut Reply| write_outcome(&refused, b"", reply))
                    as super::AsyncResponder
            })))
        }
    };
    if decoded.ops.iter().any(TxnOp::is_write) {
        return Ok(client_txn::apply(ctx, request, &decoded.ops, datacenter));
    }
    let options = super::query_options_in(ctx, &request.query)?;
    Ok(client_txn::read(
        ctx,
        request,
        &decoded.ops,
        options,
        datacenter,
    ))
}

/// A read-only transaction: served like other reads, but never blocking.
struct ReadTxn {
    ops: Vec<TxnOp>,
}

impl Query for ReadTxn {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (tables.index, WatchSet::new())
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let outcome = txn::read_only(tables, &self.ops);
        write_outcome(&outcome, &read_headers(&meta), reply);
    }
}

/// The headers Consul sends with a read-only transaction's answer.
pub fn read_headers(meta: &QueryMeta) -> Vec<u8> {
    let mut headers = Vec::with_capacity(96);
    headers.extend_from_slice(b"X-Consul-KnownLeader: ");
    headers.extend_from_slice(if meta.known_leader { b"true" } else { b"false" });
    headers.extend_from_slice(b"\r\nX-Consul-LastContact: ");
    crate::proto::http::push_u64(&mut headers, meta.last_contact_ms);
    headers.extend_from_slice(b"\r\n");
    headers
}

/// `{"Results": …, "Errors": …}` with 200, or 409 when the transaction rolled back.
pub fn write_outcome(outcome: &TxnOutcome, headers: &[u8], reply: &mut Reply) {
    let mut body = Vec::with_capacity(128 + outcome.results.len() * 256);
    let mut w = JsonWriter::new(&mut body, reply.pretty);
    w.begin_object();
    if outcome.errors.is_empty() {
        w.field_array("Results");
        for result in &outcome.results {
            w.begin_object();
            match result {
                TxnResult::Kv(entry) => {
                    w.field_object("KV");
                    kv_entry_fields(&mut w, entry);
                    w.end_object();
                }
                TxnResult::Node(node) => {
                    w.field_object("Node");
                    render::node_fields(&mut w, node);
                    w.end_object();
                }
                TxnResult::Service(service) => {
                    w.field_object("Service");
                    render::node_service_fields(&mut w, service);
                    w.end_object();
                }
                TxnResult::Check(check) => {
                    w.field_object("Check");
                    render::health_check_fields(&mut w, check);
                    w.end_object();
                }
            }
            w.end_object();
        }
        w.end_array();
        w.field_null("Errors");
    } else {
        w.field_null("Results");
        w.field_array("Errors");
        for error in &outcome.errors {
            w.begin_object();
            w.field_u64("OpIndex", error.op_index as u64);
            w.field_str("What", &error.what);
            w.end_object();
        }
        w.end_array();
    }
    w.end_object();
    w.finish();
    let status = if outcome.errors.is_empty() { 200 } else { 409 };
    reply.json_bytes(status, headers, &body);
}

fn kv_entry_fields(w: &mut JsonWriter, entry: &KvEntry) {
    let entry = entry.fields();
    w.field_u64("LockIndex", entry.lock_index);
    w.field_str("Key", entry.key);
    w.field_u64("Flags", entry.flags);
    w.field_base64_or_null("Value", entry.value);
    if let Some(session) = entry.session {
        w.field_str("Session", session);
    }
    w.field_u64("CreateIndex", entry.create_index);
    w.field_u64("ModifyIndex", entry.modify_index);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: &str) -> Result<Decoded, Refusal> {
        decode_ops(body.as_bytes(), 1024, "dc1")
    }

    #[test]
    fn operations_decode_with_consuls_prechecks() {
        let d = decode(
            r#"[{"KV":{"Verb":"set","Key":"a","Value":"aGk=","Flags":3}},
                {"kv":{"verb":"frob","key":"b"}},
                {"KV":{"Verb":"get","Key":""}},
                {"KV":{"Verb":"delete-tree","Key":""}},
                {"Node":{"Verb":"set","Node":{"Address":"1.2.3.4"}}},
                {"Service":{"Verb":"delete","Node":"n","Service":{"ID":"db1"}}},
                {"Check":{"Verb":"get","Check":{"Node":"n","CheckID":"c"}}}]"#,
        )
        .ok()
        .unwrap();
        assert_eq!(d.ops.len(), 7);
        let TxnOp::Kv { value, flags, .. } = &d.ops[0] else {
            panic!()
        };
        assert_eq!((&value[..], *flags), (&b"hi"[..], 3));
        let whats: Vec<(usize, &str)> = d
            .errors
            .iter()
            .map(|e| (e.op_index, e.what.as_str()))
            .collect();
        assert_eq!(
            whats,
            vec![
                (1, "unknown KV verb \"frob\""),
                (2, "Must provide key"),
                (4, "Must provide node"),
                (5, "Must provide service name with ID"),
            ]
        );
    }

    #[test]
    fn limits_and_bad_bodies_are_refused() {
        let many = format!(
            "[{}]",
            vec![r#"{"KV":{"Verb":"get","Key":"a"}}"#; TXN_OPS_MAX + 1].join(",")
        );
        assert!(matches!(decode(&many), Err(Refusal::TooLarge(_))));
        let exactly = format!(
            "[{}]",
            vec![r#"{"KV":{"Verb":"get","Key":"a"}}"#; TXN_OPS_MAX].join(",")
        );
        assert!(decode(&exactly).is_ok());
        let big = format!(
            r#"[{{"KV":{{"Verb":"set","Key":"a","Value":"{}"}}}}]"#,
            "QUFB".repeat(400)
        );
        assert!(matches!(decode(&big), Err(Refusal::TooLarge(_))));
        assert!(matches!(decode("{"), Err(Refusal::Decode(_))));
        assert!(matches!(decode(r#"{"KV":{}}"#), Err(Refusal::Decode(_))));
        assert!(matches!(decode(r#"[{"Foo":{}}]"#), Err(Refusal::Decode(_))));
        assert!(matches!(
            decode(r#"[{"KV":{"Verb":"set","Key":"a","Value":"!!"}}]"#),
            Err(Refusal::Decode(_))
        ));
    }
}
