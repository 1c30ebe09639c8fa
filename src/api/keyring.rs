//! `/v1/operator/keyring`: the gossip encryption keyring across the pools, as Consul's
//! endpoint (GET lists, POST installs, PUT makes primary, DELETE removes; writes take
//! `{"Key": "<base64>"}`; `?relay-factor=<0..5>` and, for a list, `?local-only`). As
//! Consul's agent, this agent — client or server — asks a server with
//! `Internal.KeyringOperation` (`api::rpc::keyring`): the server runs serf's key query over
//! its WAN pool and its LAN pool and hands the operation to every other datacenter. A
//! server runs that call's steps in its own process; a client agent sends it to one of
//! its servers. The server checks the token (`keyring:read` to list, `keyring:write`
//! otherwise), as Consul's does.
//!
//! Answers: a list of Consul's `KeyringResponse` objects, one per pool and datacenter; a
//! write answers 200 with an empty body. Any pool's failure answers 500 with Consul's
//! multi-error text naming the pool and each member's message.

use super::rpc::keyring::{self as operation, Operation, Pools, RELAY_FACTOR_MAX};
use super::{check_datacenter, ApiError, AsyncResponder, Context, Outcome, Reply, Request};
use crate::consul::rpc::keyring::{decode_key, KeyringOperation, KeyringResponse};
use crate::proto::http::Method;

/// Largest key request body accepted, in bytes (a 32-byte key is 44 base64 characters).
const KEY_REQUEST_BYTES_MAX: usize = 4096;

/// The request's body (writes): the key, the relay factor and the token it names.
struct Body {
    key: String,
    relay_factor: u8,
    token: String,
}

fn body_of(body: &[u8]) -> Result<Body, ApiError> {
    if body.len() > KEY_REQUEST_BYTES_MAX {
        return Err(ApiError::TooLarge(format!(
            "Request body too large, max size: {KEY_REQUEST_BYTES_MAX} bytes."
        )));
    }
    let value = crate::consul::body::parse_strict(body, &crate::consul::bodies::KEYRING)
        .map_err(|e| ApiError::BadRequest(format!("Request decode failed: {e}")))?;
    // Field names match case-insensitively, as Go's JSON decoding matches them.
    let field = |name: &str| {
        value.as_object().and_then(|o| {
            o.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
    };
    let text = field("key").and_then(|v| v.as_str()).unwrap_or("");
    if text.is_empty() {
        return Err(ApiError::bad_request("Missing key"));
    }
    decode_key(text).map_err(ApiError::BadRequest)?;
    let relay_factor = match field("relayfactor").and_then(|v| v.as_u64()) {
        None => 0,
        Some(n) => u8::try_from(n).map_err(|_| {
            ApiError::BadRequest(format!(
                "Request decode failed: json: cannot unmarshal number {n} into Go struct field keyringArgs.RelayFactor of type uint8"
            ))
        })?,
    };
    Ok(Body {
        key: text.trim().to_string(),
        relay_factor,
        token: field("token")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string(),
    })
}

/// `?relay-factor`, checked as Consul's `ParseRelayFactor` checks it.
fn relay_factor_of(request: &Request) -> Result<Option<u8>, ApiError> {
    let Some(text) = request.query.get("relay-factor").filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let n: i64 = text.parse().map_err(|_| {
        ApiError::BadRequest(format!(
            "Error parsing relay factor: strconv.Atoi: parsing {text:?}: invalid syntax"
        ))
    })?;
    match u8::try_from(n) {
        Ok(n) if n <= RELAY_FACTOR_MAX => Ok(Some(n)),
        _ => Err(ApiError::BadRequest(format!(
            "Invalid relay-factor: Relay factor must be in range: [0, {RELAY_FACTOR_MAX}]"
        ))),
    }
}

/// `?local-only`, read as Go's `strconv.ParseBool` reads it; only a list may set it.
fn local_only_of(request: &Request) -> Result<bool, ApiError> {
    let Some(text) = request.query.get("local-only").filter(|t| !t.is_empty()) else {
        return Ok(false);
    };
    let local_only = match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
        "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
        _ => {
            return Err(ApiError::BadRequest(format!(
                "Error parsing local-only: strconv.ParseBool: parsing {text:?}: invalid syntax"
            )))
        }
    };
    if local_only && request.method != Method::Get {
        return Err(ApiError::bad_request(
            "Invalid use of local-only: local-only can only be set for list requests",
        ));
    }
    Ok(local_only)
}

/// `/v1/operator/keyring`: list (GET), install (POST), use (PUT) or remove (DELETE) a key.
pub fn keyring(ctx: &Context, request: &Request, _: &mut Reply) -> Result<Outcome, ApiError> {
    check_datacenter(ctx, &request.query)?;
    let kind = match request.method {
        Method::Get => KeyringOperation::List,
        Method::Post => KeyringOperation::Install,
        Method::Put => KeyringOperation::Use,
        _ => KeyringOperation::Remove,
    };
    let body = if kind == KeyringOperation::List {
        Body {
            key: String::new(),
            relay_factor: 0,
            token: String::new(),
        }
    } else {
        body_of(request.body)?
    };
    let relay_factor = relay_factor_of(request)?.unwrap_or(body.relay_factor);
    let local_only = local_only_of(request)?;
    let token = match request.token() {
        Some(token) => token.to_string(),
        None if !body.token.is_empty() => body.token,
        None => ctx.agent_default_token().unwrap_or_default(),
    };
    let operation = Operation {
        operation: kind,
        key: body.key,
        relay_factor,
        local_only,
        forwarded: false,
        token,
    };
    if ctx.is_client() {
        return Ok(operation::ask_server(
            ctx,
            &operation,
            move |responses, reply| answer(kind, responses, reply),
        ));
    }
    // A server answers from its own pools, with the steps its endpoint runs.
    operation::permit(ctx, &operation).map_err(operation::http_error)?;
    let pools = Pools::of(ctx);
    Ok(Outcome::Async(Box::pin(async move {
        let result = operation::run(pools, operation).await;
        Box::new(move |reply: &mut Reply| match result {
            Ok(responses) => answer(kind, &responses, reply),
            Err(error) => reply.error(&operation::http_error(error)),
        }) as AsyncResponder
    })))
}

/// The HTTP answer to the pools' responses, as Consul's agent gives it: 500 with every
/// pool's error (`keyringErrorsOrNil`), else the list, or 200 with no body for a write.
fn answer(kind: KeyringOperation, responses: &[KeyringResponse], reply: &mut Reply) {
    if let Some(errors) = keyring_errors(responses) {
        reply.error(&ApiError::Internal(errors));
    } else if kind == KeyringOperation::List {
        let body: Vec<_> = responses.iter().map(response_json).collect();
        reply.json(200, b"", &body);
    } else {
        reply.send(200, None, b"", b"");
    }
}

/// Consul's `keyringErrorsOrNil`: for each pool that failed, `<pool> error: <error>` and
/// each member's message, as a go-multierror list.
pub fn keyring_errors(responses: &[KeyringResponse]) -> Option<String> {
    let mut errors = Vec::new();
    for response in responses.iter().filter(|r| !r.error.is_empty()) {
        let mut pool = if response.wan {
            "WAN".to_string()
        } else {
            format!("{} (LAN)", response.datacenter)
        };
        if !response.segment.is_empty() {
            pool.push_str(&format!(" [segment: {}]", response.segment));
        } else if !response.partition.is_empty() && response.partition != "default" {
            pool.push_str(&format!(" [partition: {}]", response.partition));
        }
        errors.push(format!("{pool} error: {}", response.error));
        for (node, message) in &response.messages {
            errors.push(format!("{node}: {message}"));
        }
    }
    match errors.len() {
        0 => None,
        1 => Some(format!("1 error occurred:\n\t* {}\n\n", errors[0])),
        n => Some(format!(
            "{n} errors occurred:\n\t{}\n\n",
            errors
                .iter()
                .map(|e| format!("* {e}"))
                .collect::<Vec<_>>()
                .join("\n\t")
        )),
    }
}

/// Consul's JSON for one `KeyringResponse` (`Partition`, `Messages` and `Error` left out
/// when empty, as their `omitempty` tags say).
fn response_json(response: &KeyringResponse) -> serde_json::Value {
    let mut json = serde_json::json!({
        "WAN": response.wan,
        "Datacenter": response.datacenter,
        "Segment": response.segment,
        "Keys": response.keys,
        "PrimaryKeys": response.primary_keys,
        "NumNodes": response.num_nodes,
    });
    let object = json.as_object_mut().expect("an object");
    if !response.partition.is_empty() {
        object.insert("Partition".into(), response.partition.clone().into());
    }
    if !response.messages.is_empty() {
        object.insert(
            "Messages".into(),
            serde_json::to_value(&response.messages).expect("a string map"),
        );
    }
    if !response.error.is_empty() {
        object.insert("Error".into(), response.error.clone().into());
    }
    json
}
