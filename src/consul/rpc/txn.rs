//! Transactions: `Txn.Apply` (`TxnRequest`) and `Txn.Read` (`TxnReadRequest`), whose `Ops`
//! are KV, node, service and check operations (`TxnKVOp`, `TxnNodeOp`, `TxnServiceOp`,
//! `TxnCheckOp`), decoded into the store's [`TxnOp`]s with the pre-checks Consul's
//! `Txn.preCheck` makes; and `TxnResponse` / `TxnReadResponse`.

use super::catalog::{
    read_check, read_service, write_health_check, write_node, write_node_service,
};
use super::kvs::{write_dir_entry, DirEntry};
use super::{each_field, owned_pairs, string_map, Fields, QueryMeta, QueryOptions};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::catalog::Registration;
use crate::store::txn::{
    service_precheck, CatalogVerb, KvVerb, TxnError, TxnOp, TxnOutcome, TxnResult, TXN_OPS_MAX,
};
use bytes::Bytes;

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
