//! `/v1/operator/keyring`: the gossip encryption keyring across the pool, as Consul's
//! endpoint (GET lists, POST installs, PUT makes primary, DELETE removes; writes take
//! `{"Key": "<base64>"}`). Each operation is serf's key query over this agent's LAN pool
//! (and the WAN pool on a server that runs one), so every member that answers reports
//! or changes its own keyring.
//!
//! Answers: a list of Consul's `KeyringResponse` objects, one per pool; a write answers
//! 200 with an empty body, or 500 naming how many nodes failed and why.

use super::members::{lan_handle, wan_handle};
use super::{check_datacenter, ApiError, AsyncResponder, Context, Outcome, Reply, Request};
use crate::cluster::gossip::GossipHandle;
use crate::gossip::{KeyOp, KeyOpResult};
use crate::proto::http::Method;

/// Largest key request body accepted, in bytes (a 32-byte key is 44 base64 characters).
const KEY_REQUEST_BYTES_MAX: usize = 4096;

/// Decodes and checks a base64 gossip key (16, 24 or 32 bytes once decoded).
pub fn decode_key(text: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("Invalid key: {e}"))?;
    if ![16, 24, 32].contains(&key.len()) {
        return Err(format!(
            "Invalid key: key size must be 16, 24 or 32 bytes, got {}",
            key.len()
        ));
    }
    Ok(key)
}

fn key_from_body(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    if body.len() > KEY_REQUEST_BYTES_MAX {
        return Err(ApiError::TooLarge(format!(
            "Request body too large, max size: {KEY_REQUEST_BYTES_MAX} bytes."
        )));
    }
    let value = crate::consul::body::parse_strict(body, &crate::consul::bodies::KEYRING)
        .map_err(|e| ApiError::BadRequest(format!("Request decode failed: {e}")))?;
    let text = value
        .as_object()
        .and_then(|o| {
            o.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("key"))
                .map(|(_, v)| v)
        })
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if text.is_empty() {
        return Err(ApiError::bad_request("Missing key"));
    }
    decode_key(text).map_err(ApiError::BadRequest)
}

/// `/v1/operator/keyring`: list (GET), install (POST), use (PUT) or remove (DELETE) a key.
pub fn keyring(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let op = match request.method {
        Method::Get => KeyOp::List,
        Method::Post => KeyOp::Install(key_from_body(request.body)?),
        Method::Put => KeyOp::Use(key_from_body(request.body)?),
        _ => KeyOp::Remove(key_from_body(request.body)?),
    };
    let listing = matches!(op, KeyOp::List);
    let datacenter = ctx.config().datacenter.clone();
    let mut pools: Vec<(bool, GossipHandle)> = Vec::new();
    if let Some(wan) = wan_handle(ctx) {
        pools.push((true, wan));
    }
    pools.push((false, lan_handle(ctx)?));
    Ok(Outcome::Async(Box::pin(async move {
        let mut results: Vec<(bool, Result<KeyOpResult, String>)> = Vec::new();
        for (wan, handle) in pools {
            let result = handle.keyring(op.clone()).await.map_err(|e| e.to_string());
            results.push((wan, result));
        }
        Box::new(move |reply: &mut Reply| {
            let mut failures = Vec::new();
            let mut body = Vec::new();
            for (wan, result) in &results {
                match result {
                    Ok(r) => {
                        if r.num_err > 0 {
                            let mut text = format!(
                                "{} error: {}/{} nodes reported failure",
                                if *wan { "WAN" } else { "LAN" },
                                r.num_err,
                                r.num_nodes
                            );
                            for (node, message) in &r.messages {
                                text.push_str(&format!("\n\t{node}: {message}"));
                            }
                            failures.push(text);
                        }
                        body.push(response_json(*wan, &datacenter, r));
                    }
                    Err(e) => failures.push(e.clone()),
                }
            }
            if !failures.is_empty() {
                reply.error(&ApiError::Internal(failures.join("\n")));
            } else if listing {
                reply.json(200, b"", &body);
            } else {
                reply.send(200, None, b"", b"");
            }
        }) as AsyncResponder
    })))
}

/// Consul's `KeyringResponse` for one pool.
fn response_json(wan: bool, datacenter: &str, result: &KeyOpResult) -> serde_json::Value {
    serde_json::json!({
        "WAN": wan,
        "Datacenter": datacenter,
        "Segment": "",
        "Messages": result.messages,
        "Keys": result.keys,
        "PrimaryKeys": result.primary_keys,
        "NumNodes": result.num_nodes,
    })
}
