//! Transactions: `Txn.Apply` (`TxnRequest`) and `Txn.Read` (`TxnReadRequest`), whose `Ops`
//! are KV, node, service and check operations (`TxnKVOp`, `TxnNodeOp`, `TxnServiceOp`,
//! `TxnCheckOp`), decoded into the store's [`TxnOp`]s with the pre-checks Consul's
//! `Txn.preCheck` makes; and `TxnResponse` / `TxnReadResponse`. A client agent encodes
//! the store's operations ([`encode_apply`], [`encode_read`]) and reads the response back
//! into the store's results ([`read_response`]), which it renders as a server's HTTP
//! answer does.

use super::catalog::{
    read_check, read_service, write_health_check, write_node, write_node_service,
    write_registered_check, write_registered_service,
};
use super::kvs::{write_dir_entry, DirEntry};
use super::rows::{read_health_check, read_node, read_node_service};
use super::{
    each_field, owned_pairs, read_reply, string_map, write_string_map, Fields, QueryMeta,
    QueryOptions,
};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::catalog::{Registration, RowArc};
use crate::store::kv::{KvEntry, KvFields};
use crate::store::txn::{
    service_precheck, CatalogVerb, KvVerb, TxnError, TxnOp, TxnOutcome, TxnResult, TXN_OPS_MAX,
};
use bytes::Bytes;
use std::sync::Arc;

/// A decoded transaction: its operations, the pre-check failures found while decoding them,
/// and the request's options (a `TxnRequest` carries only a token).
#[derive(Clone, Debug, Default)]
pub struct TxnRequest<'a> {
    pub datacenter: &'a str,
    pub ops: Vec<TxnOp>,
    pub errors: Vec<TxnError>,
    pub options: QueryOptions<'a>,
}

/// The decode failure of a transaction: net/rpc's, or too many operations.
pub fn decode(body: &[u8]) -> Result<TxnRequest<'_>, String> {
    let mut request = TxnRequest::default();
    let mut datacenter = "";
    let mut too_many = None;
    each_field(&mut Reader::new(body), |name, r| {
        match name {
            "Datacenter" => datacenter = r.str()?,
            "Ops" => {
                let count = r.array_len()?;
                if count > TXN_OPS_MAX {
                    too_many = Some(count);
                    for _ in 0..count {
                        r.skip()?;
                    }
                    return Ok(true);
                }
                for op_index in 0..count {
                    let (op, precheck) = read_op(r)?;
                    if let Some(what) = precheck {
                        request.errors.push(TxnError { op_index, what });
                    }
                    request.ops.push(op);
                }
            }
            _ => return request.options.field(name, r),
        }
        Ok(true)
    })
    .map_err(super::decode_error)?;
    if let Some(count) = too_many {
        return Err(format!(
            "Transaction contains too many operations ({count} > {TXN_OPS_MAX})"
        ));
    }
    request.datacenter = datacenter;
    Ok(request)
}

/// One `TxnOp`: exactly one of its pointers is set.
fn read_op(r: &mut Reader) -> Result<(TxnOp, Option<String>), WireError> {
    let mut found = None;
    each_field(r, |name, r| {
        if r.try_nil()? {
            return Ok(true);
        }
        let op = match name {
            "KV" => read_kv(r)?,
            "Node" => read_node_op(r)?,
            "Service" => read_service_op(r)?,
            "Check" => read_check_op(r)?,
            _ => return Ok(false),
        };
        found.get_or_insert(op);
        Ok(true)
    })?;
    Ok(found.unwrap_or_else(|| {
        (
            TxnOp::Kv {
                verb: KvVerb::Get,
                key: String::new(),
                value: Bytes::new(),
                flags: 0,
                index: 0,
                session: String::new(),
            },
            Some("each operation must be one of KV, Node, Service or Check".to_string()),
        )
    }))
}

fn verb_and<'a, T>(
    r: &mut Reader<'a>,
    object: &'static str,
    mut read: impl FnMut(&mut Reader<'a>) -> Result<T, WireError>,
) -> Result<(&'a str, Option<T>), WireError> {
    let mut verb = "";
    let mut value = None;
    each_field(r, |name, r| {
        if name == "Verb" {
            verb = r.str()?;
        } else if name == object {
            value = Some(read(r)?);
        } else {
            return Ok(false);
        }
        Ok(true)
    })?;
    Ok((verb, value))
}

fn read_kv(r: &mut Reader) -> Result<(TxnOp, Option<String>), WireError> {
    let (verb_text, entry) = verb_and(r, "DirEnt", DirEntry::read)?;
    let entry = entry.unwrap_or_default();
    let verb = KvVerb::parse(verb_text);
    let precheck = match verb {
        None => Some(format!("unknown KV verb {verb_text:?}")),
        Some(v) if entry.key.is_empty() && v != KvVerb::DeleteTree => {
            Some("Must provide key".to_string())
        }
        Some(_) => None,
    };
    // A check or CAS names its index in the entry's `ModifyIndex`, as Consul's does.
    Ok((
        TxnOp::Kv {
            verb: verb.unwrap_or(KvVerb::Get),
            key: entry.key.to_string(),
            value: Bytes::copy_from_slice(entry.value),
            flags: entry.flags,
            index: entry.modify_index,
            session: entry.session.to_ascii_lowercase(),
        },
        precheck,
    ))
}

fn read_node_op(r: &mut Reader) -> Result<(TxnOp, Option<String>), WireError> {
    let mut modify_index = 0;
    let (verb_text, registration) = verb_and(r, "Node", |r| {
        let mut reg = Registration::default();
        each_field(r, |name, r| {
            match name {
                "ID" => reg.id = r.str()?.to_ascii_lowercase(),
                "Node" => reg.node = r.str()?.to_string(),
                "Address" => reg.address = r.str()?.to_string(),
                "Datacenter" => reg.datacenter = r.str()?.to_string(),
                "TaggedAddresses" => reg.tagged_addresses = owned_pairs(&string_map(r)?),
                "Meta" => reg.node_meta = owned_pairs(&string_map(r)?),
                "ModifyIndex" => modify_index = r.u64("ModifyIndex")?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(reg)
    })?;
    let registration = registration.unwrap_or_default();
    let verb = CatalogVerb::parse(verb_text);
    let precheck = match verb {
        None => Some(format!("unknown node operation: {verb_text}")),
        Some(CatalogVerb::Get) => None,
        Some(_) if registration.node.is_empty() => Some("Must provide node".to_string()),
        Some(_) => None,
    };
    Ok((
        TxnOp::Node {
            verb: verb.unwrap_or(CatalogVerb::Get),
            registration,
            modify_index,
        },
        precheck,
    ))
}

fn read_service_op(r: &mut Reader) -> Result<(TxnOp, Option<String>), WireError> {
    let mut verb_text = "";
    let mut node = "";
    let mut service = None;
    let mut modify_index = 0;
    each_field(r, |name, r| {
        match name {
            "Verb" => verb_text = r.str()?,
            "Node" => node = r.str()?,
            "Service" => {
                let start = r.rest();
                let mut peer = false;
                service = Some(read_service(r, &mut peer)?);
                modify_index = modify_index_of(start, r)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let mut service = service.unwrap_or_default();
    let (verb, precheck) = service_precheck(verb_text, node, &mut service);
    Ok((
        TxnOp::Service {
            verb: verb.unwrap_or(CatalogVerb::Get),
            node: node.to_string(),
            service,
            modify_index,
        },
        precheck,
    ))
}

/// The `ModifyIndex` of the struct just read from `start` (whose rest is now `r`'s): the
/// index a CAS compares, which the row's decoder does not keep.
fn modify_index_of(start: &[u8], r: &Reader) -> Result<u64, WireError> {
    let consumed = start.len() - r.rest().len();
    let mut modify_index = 0;
    each_field(&mut Reader::new(&start[..consumed]), |name, r| {
        if name == "ModifyIndex" {
            modify_index = r.u64("ModifyIndex")?;
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok(modify_index)
}

fn read_check_op(r: &mut Reader) -> Result<(TxnOp, Option<String>), WireError> {
    let mut verb_text = "";
    let mut check = None;
    let mut modify_index = 0;
    let mut failed = None;
    each_field(r, |name, r| {
        match name {
            "Verb" => verb_text = r.str()?,
            "Check" => {
                let start = r.rest();
                let mut peer = false;
                match read_check(r, "", &mut peer) {
                    Ok(read) => check = Some(read),
                    Err(super::catalog::RegisterError::Decode(e)) => return Err(e),
                    Err(super::catalog::RegisterError::Invalid(why)) => {
                        failed = Some(why);
                        return Ok(true);
                    }
                }
                modify_index = modify_index_of(start, r)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let check = check.unwrap_or_default();
    let verb = CatalogVerb::parse(verb_text);
    let precheck = match (failed, verb) {
        (Some(why), _) => Some(why),
        (None, None) => Some(format!("unknown check operation: {verb_text}")),
        (None, Some(CatalogVerb::Get)) => None,
        (None, Some(_)) if check.node.is_empty() => Some("Must provide node".to_string()),
        (None, Some(_)) => None,
    };
    Ok((
        TxnOp::Check {
            verb: verb.unwrap_or(CatalogVerb::Get),
            check,
            modify_index,
        },
        precheck,
    ))
}

/// The `Node` of a `TxnNodeOp`: the registration's node columns, with the index a CAS
/// compares.
fn write_op_node(w: &mut Writer, registration: &Registration, modify_index: u64) {
    let mut f = Fields::new(w, 8);
    f.field("Address").str(&registration.address);
    f.field("CreateIndex").uint(0);
    f.field("Datacenter").str(&registration.datacenter);
    f.field("ID").str(&registration.id);
    write_string_map(
        f.field("Meta"),
        registration
            .node_meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
        true,
    );
    f.field("ModifyIndex").uint(modify_index);
    f.field("Node").str(&registration.node);
    write_string_map(
        f.field("TaggedAddresses"),
        registration
            .tagged_addresses
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
        true,
    );
    f.finish();
}

/// One `TxnOp`: the operation's own pointer set, the other three nil.
fn write_op(w: &mut Writer, op: &TxnOp) {
    let mut f = Fields::new(w, 4);
    match op {
        TxnOp::Check {
            verb,
            check,
            modify_index,
        } => {
            let mut c = Fields::new(f.field("Check"), 2);
            write_registered_check(c.field("Check"), check, Some(*modify_index));
            c.field("Verb").str(verb.as_str());
            c.finish();
        }
        _ => f.field("Check").nil(),
    }
    match op {
        TxnOp::Kv {
            verb,
            key,
            value,
            flags,
            index,
            session,
        } => {
            let mut k = Fields::new(f.field("KV"), 2);
            let entry = KvFields {
                key,
                value,
                flags: *flags,
                session: Some(session.as_str()),
                lock_index: 0,
                create_index: 0,
                modify_index: *index,
            };
            super::kvs::write_dir_entry(k.field("DirEnt"), &entry);
            k.field("Verb").str(verb.as_str());
            k.finish();
        }
        _ => f.field("KV").nil(),
    }
    match op {
        TxnOp::Node {
            verb,
            registration,
            modify_index,
        } => {
            let mut n = Fields::new(f.field("Node"), 2);
            write_op_node(n.field("Node"), registration, *modify_index);
            n.field("Verb").str(verb.as_str());
            n.finish();
        }
        _ => f.field("Node").nil(),
    }
    match op {
        TxnOp::Service {
            verb,
            node,
            service,
            modify_index,
        } => {
            let mut s = Fields::new(f.field("Service"), 3);
            s.field("Node").str(node);
            write_registered_service(s.field("Service"), service, Some(*modify_index));
            s.field("Verb").str(verb.as_str());
            s.finish();
        }
        _ => f.field("Service").nil(),
    }
    f.finish();
}

fn write_ops(w: &mut Writer, ops: &[TxnOp]) {
    w.array_len(ops.len());
    for op in ops {
        write_op(w, op);
    }
}

/// `Txn.Apply`'s `TxnRequest` as a client agent sends it, for `datacenter` (empty: the
/// server's own).
pub fn encode_apply(datacenter: &str, ops: &[TxnOp], token: &str) -> Vec<u8> {
    let mut w = Writer::new();
    let mut f = Fields::new(&mut w, 3);
    f.field("Datacenter").str(datacenter);
    write_ops(f.field("Ops"), ops);
    f.field("Token").str(token);
    f.finish();
    w.into_inner()
}

/// `Txn.Read`'s `TxnReadRequest` (read operations only) as a client agent sends it, for
/// `datacenter` (empty: the server's own).
pub fn encode_read(datacenter: &str, ops: &[TxnOp], options: &QueryOptions) -> Vec<u8> {
    let mut w = Writer::new();
    options.write_request(&mut w, &["Datacenter", "Ops"], |name, w| match name {
        "Datacenter" => w.str(datacenter),
        _ => write_ops(w, ops),
    });
    w.into_inner()
}

/// One entry of `Results`: the one pointer that is set.
fn read_result(r: &mut Reader) -> Result<Option<TxnResult>, WireError> {
    let mut found = None;
    each_field(r, |name, r| {
        if r.try_nil()? {
            return Ok(true);
        }
        let result = match name {
            "KV" => TxnResult::Kv(KvEntry::new(DirEntry::read(r)?.fields())),
            "Node" => TxnResult::Node(Arc::new(read_node(r)?)),
            "Service" => {
                // A `NodeService` names no node; the answer renders none.
                let node = read_node(&mut Reader::new(&[0x80]))?;
                TxnResult::Service(RowArc::new(read_node_service(r, &node)?))
            }
            "Check" => TxnResult::Check(RowArc::new(read_health_check(r)?)),
            _ => return Ok(false),
        };
        found.get_or_insert(result);
        Ok(true)
    })?;
    Ok(found)
}

/// A `TxnResponse` or `TxnReadResponse` read back into the store's outcome (with the
/// `QueryMeta` of a read; zero for an apply).
pub fn read_response(body: &[u8]) -> Result<(QueryMeta, TxnOutcome), WireError> {
    let mut outcome = TxnOutcome {
        results: Vec::new(),
        errors: Vec::new(),
    };
    let meta = read_reply(body, |name, r| {
        match name {
            "Results" => {
                let count = r.array_len()?;
                for _ in 0..count {
                    let result = read_result(r)?
                        .ok_or(WireError::Invalid("a transaction result with no value"))?;
                    outcome.results.push(result);
                }
            }
            "Errors" => {
                let count = r.array_len()?;
                for _ in 0..count {
                    let mut error = TxnError {
                        op_index: 0,
                        what: String::new(),
                    };
                    each_field(r, |name, r| {
                        match name {
                            "OpIndex" => {
                                error.op_index = usize::try_from(r.u64("OpIndex")?)
                                    .map_err(|_| WireError::IntegerOverflow { field: "OpIndex" })?
                            }
                            "What" => error.what = r.str()?.to_string(),
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?;
                    outcome.errors.push(error);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((meta, outcome))
}

fn write_results(w: &mut Writer, outcome: &TxnOutcome) {
    if outcome.results.is_empty() {
        w.nil();
        return;
    }
    w.array_len(outcome.results.len());
    for result in &outcome.results {
        let mut f = Fields::new(w, 4);
        match result {
            TxnResult::Check(check) => write_health_check(f.field("Check"), check),
            _ => f.field("Check").nil(),
        }
        match result {
            TxnResult::Kv(entry) => write_dir_entry(f.field("KV"), &entry.fields()),
            _ => f.field("KV").nil(),
        }
        match result {
            TxnResult::Node(node) => write_node(f.field("Node"), node),
            _ => f.field("Node").nil(),
        }
        match result {
            TxnResult::Service(service) => write_node_service(f.field("Service"), service),
            _ => f.field("Service").nil(),
        }
        f.finish();
    }
}

fn write_errors(w: &mut Writer, outcome: &TxnOutcome) {
    if outcome.errors.is_empty() {
        w.nil();
        return;
    }
    w.array_len(outcome.errors.len());
    for error in &outcome.errors {
        let mut f = Fields::new(w, 2);
        f.field("OpIndex").uint(error.op_index as u64);
        f.field("What").str(&error.what);
        f.finish();
    }
}

/// `TxnResponse`.
pub fn write_response(w: &mut Writer, outcome: &TxnOutcome) {
    let mut f = Fields::new(w, 2);
    write_errors(f.field("Errors"), outcome);
    write_results(f.field("Results"), outcome);
    f.finish();
}

/// `TxnReadResponse`: the response with `QueryMeta`.
pub fn write_read_response(w: &mut Writer, meta: &QueryMeta, outcome: &TxnOutcome) {
    meta.write_reply(w, &["Errors", "Results"], |name, w| match name {
        "Errors" => write_errors(w, outcome),
        _ => write_results(w, outcome),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_decode_with_consuls_prechecks() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 2);
        f.field("Datacenter").str("dc1");
        {
            let w = f.field("Ops");
            w.array_len(3);
            // A KV set.
            let mut op = Fields::new(w, 1);
            {
                let w = op.field("KV");
                let mut kv = Fields::new(w, 2);
                {
                    let w = kv.field("DirEnt");
                    let mut e = Fields::new(w, 2);
                    e.field("Key").str("a");
                    e.field("Value").str("1");
                    e.finish();
                }
                kv.field("Verb").str("set");
                kv.finish();
            }
            op.finish();
            // An unknown verb.
            let mut op = Fields::new(w, 1);
            {
                let w = op.field("KV");
                let mut kv = Fields::new(w, 1);
                kv.field("Verb").str("frob");
                kv.finish();
            }
            op.finish();
            // A service without a node.
            let mut op = Fields::new(w, 1);
            {
                let w = op.field("Service");
                let mut s = Fields::new(w, 2);
                {
                    let w = s.field("Service");
                    let mut svc = Fields::new(w, 1);
                    svc.field("Service").str("web");
                    svc.finish();
                }
                s.field("Verb").str("set");
                s.finish();
            }
            op.finish();
        }
        f.finish();
        let request = decode(&w.buf).unwrap();
        assert_eq!(request.datacenter, "dc1");
        assert_eq!(request.ops.len(), 3);
        assert!(matches!(&request.ops[0], TxnOp::Kv { verb: KvVerb::Set, key, .. } if key == "a"));
        let whats: Vec<(usize, &str)> = request
            .errors
            .iter()
            .map(|e| (e.op_index, e.what.as_str()))
            .collect();
        assert_eq!(
            whats,
            vec![(1, "unknown KV verb \"frob\""), (2, "Must provide node")]
        );
    }

    #[test]
    fn a_client_agents_operations_decode_on_the_server_as_they_were() {
        use crate::store::catalog::{CheckRegistration, ServiceRegistration};
        let ops = vec![
            TxnOp::Kv {
                verb: KvVerb::Cas,
                key: "k".into(),
                value: Bytes::from_static(b"v"),
                flags: 3,
                index: 9,
                session: String::new(),
            },
            TxnOp::Node {
                verb: CatalogVerb::Set,
                registration: Registration {
                    node: "n".into(),
                    address: "10.0.0.1".into(),
                    node_meta: vec![("rack".into(), "r1".into())],
                    ..Registration::default()
                },
                modify_index: 4,
            },
            TxnOp::Service {
                verb: CatalogVerb::DeleteCas,
                node: "n".into(),
                service: ServiceRegistration {
                    id: "web".into(),
                    name: "web".into(),
                    port: 80,
                    ..ServiceRegistration::default()
                },
                modify_index: 5,
            },
            TxnOp::Check {
                verb: CatalogVerb::Cas,
                check: CheckRegistration {
                    node: "n".into(),
                    check_id: "c".into(),
                    name: "c".into(),
                    status: "passing".into(),
                    ..CheckRegistration::default()
                },
                modify_index: 6,
            },
        ];
        let body = encode_apply("", &ops, "t");
        let request = decode(&body).unwrap();
        assert_eq!(request.options.token, "t");
        assert!(request.errors.is_empty(), "{:?}", request.errors);
        assert!(matches!(&request.ops[0],
            TxnOp::Kv { verb: KvVerb::Cas, key, flags: 3, index: 9, .. } if key == "k"));
        assert!(matches!(&request.ops[1],
            TxnOp::Node { verb: CatalogVerb::Set, registration, modify_index: 4 }
                if registration.node_meta == vec![("rack".to_string(), "r1".to_string())]));
        assert!(matches!(&request.ops[2],
            TxnOp::Service { verb: CatalogVerb::DeleteCas, service, modify_index: 5, .. }
                if service.port == 80));
        assert!(matches!(&request.ops[3],
            TxnOp::Check { verb: CatalogVerb::Cas, check, modify_index: 6 }
                if check.check_id == "c"));
        // A read goes with its query options.
        let options = QueryOptions {
            allow_stale: true,
            ..QueryOptions::default()
        };
        let body = encode_read("", &ops[..1], &options);
        let request = decode(&body).unwrap();
        assert!(request.options.allow_stale);
        assert_eq!(request.ops.len(), 1);
    }

    #[test]
    fn too_many_operations_are_refused() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 1);
        {
            let w = f.field("Ops");
            w.array_len(TXN_OPS_MAX + 1);
            for _ in 0..=TXN_OPS_MAX {
                w.map_len(0);
            }
        }
        f.finish();
        assert!(decode(&w.buf).unwrap_err().contains("too many operations"));
    }
}
