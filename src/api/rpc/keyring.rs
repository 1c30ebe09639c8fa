//! `Internal.KeyringOperation`: the gossip keyrings listed or changed through a server, as
//! Consul's agent asks for `/v1/operator/keyring` and its server answers
//! (`internal_endpoint.go`). The server runs serf's key query over its WAN pool (when it
//! runs one) and its LAN pool, then hands the same request, marked `Forwarded`, to a
//! server of every other datacenter the WAN router knows, which runs it over its own LAN
//! pool only; the answer is one `KeyringResponse` per pool and datacenter, WAN first. A
//! `LocalOnly` list, a forwarded request, or a server without a WAN pool stays in this
//! datacenter's LAN pool.
//!
//! The token is checked here as Consul's endpoint checks it — `keyring:read` to list,
//! `keyring:write` to change — on every server a request reaches. A client agent sends the
//! call to its server ([`ask_server`]); a server's own HTTP handler runs the same steps in
//! its own process ([`permit`] then [`run`]), so both answer alike.
//!
//! A failure over one pool (a member that refused, a member that did not answer before
//! the query's timeout) is that pool's `Error`, not the call's: the agent turns the
//! pools' errors into its HTTP error (`api::keyring`). Only a failure to reach another
//! datacenter fails the whole call, as Consul's `keyringRPCs` does.

use super::client::{bad_reply, call, error_of};
use super::{decode_error, Answer};
use crate::api::context::Deferred;
use crate::api::server::Server;
use crate::api::{ApiError, Context, Outcome, Reply};
use crate::cluster::gossip::GossipHandle;
use crate::cluster::servers::Retry;
use crate::consul::rpc::keyring::{
    read_keyring_responses, write_keyring_responses, KeyringOperation, KeyringRequest,
    KeyringResponse,
};
use crate::consul::rpc::{QueryMeta, QueryOptions};
use crate::gossip::{KeyOp, KeyOpResult};
use crate::proto::msgpack::Writer;
use crate::shard::rpc_client::CallError;
use crate::shard::rpc_server::TypedCall;
use std::time::Duration;

/// How long a keyring call waits for its answer: serf's key queries over two pools (each
/// bounded by its query timeout, seconds on a WAN pool) and the other datacenters' answers.
const KEYRING_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest relay factor serf accepts (Consul's `ParseRelayFactor`), in members.
pub const RELAY_FACTOR_MAX: u8 = 5;

/// A keyring operation as the server runs it, owned so that it outlives the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    pub operation: KeyringOperation,
    /// The key in base64 (empty for a list).
    pub key: String,
    pub relay_factor: u8,
    pub local_only: bool,
    pub forwarded: bool,
    pub token: String,
}

impl Operation {
    /// Consul's `KeyringRequest` for this operation (the agent's leaves `Datacenter` empty:
    /// the call runs on whichever server receives it).
    pub fn encode(&self) -> Vec<u8> {
        KeyringRequest {
            operation: self.operation.as_str(),
            key: &self.key,
            datacenter: "",
            forwarded: self.forwarded,
            relay_factor: self.relay_factor,
            local_only: self.local_only,
            options: QueryOptions {
                token: &self.token,
                ..QueryOptions::default()
            },
        }
        .encode()
    }

    /// A list changes nothing: its call may be sent again after a transport failure.
    fn retry(&self) -> Retry {
        if self.operation == KeyringOperation::List {
            Retry::Always
        } else {
            Retry::NotSent
        }
    }
}

/// Consul's checks before any gossip: `LocalOnly` lists only, then the token's
/// `keyring:read` (a list) or `keyring:write` (the others). The error is Consul's text.
pub fn permit(ctx: &Context, operation: &Operation) -> Result<(), String> {
    if operation.local_only && operation.operation != KeyringOperation::List {
        return Err("argument error: LocalOnly can only be used for List operations".to_string());
    }
    if !ctx.acl_enabled() {
        return Ok(());
    }
    let authz = crate::api::authz::resolve(ctx, &operation.token).map_err(|e| e.text())?;
    let a = &authz.authorizer;
    authz
        .require(if operation.operation == KeyringOperation::List {
            a.keyring_read()
        } else {
            a.keyring_write()
        })
        .map_err(|e| e.text())
}

/// What [`run`] needs of the server: its gossip pools, its datacenter, and its way to
/// other datacenters' servers.
pub struct Pools {
    lan: Option<GossipHandle>,
    wan: Option<GossipHandle>,
    datacenter: String,
    deferred: Deferred,
}

impl Pools {
    pub fn of(ctx: &Context) -> Pools {
        Pools {
            lan: ctx.lan().cloned(),
            wan: ctx.wan().cloned(),
            datacenter: ctx.config().datacenter.clone(),
            deferred: ctx.deferred(),
        }
    }
}

/// The serf key operation of `operation`, or why its key is not one.
fn key_op(operation: &Operation) -> Result<KeyOp, String> {
    if operation.operation == KeyringOperation::List {
        return Ok(KeyOp::List);
    }
    let key = crate::consul::rpc::keyring::decode_key(&operation.key)?;
    Ok(match operation.operation {
        KeyringOperation::Install => KeyOp::Install(key),
        KeyringOperation::Use => KeyOp::Use(key),
        _ => KeyOp::Remove(key),
    })
}

/// serf's verdict on an aggregated key query (`KeyManager.handleKeyRequest`): members that
/// refused, else members that did not answer; empty when every member succeeded.
fn serf_error(result: &KeyOpResult) -> String {
    if result.num_err > 0 {
        format!(
            "{}/{} nodes reported failure",
            result.num_err, result.num_nodes
        )
    } else if result.num_resp != result.num_nodes {
        format!(
            "{}/{} nodes reported success",
            result.num_resp, result.num_nodes
        )
    } else {
        String::new()
    }
}

/// One pool's `KeyringResponse` (Consul's `translateKeyResponseToKeyringResponse`).
async fn over_pool(
    pool: Option<GossipHandle>,
    wan: bool,
    datacenter: String,
    op: Result<KeyOp, String>,
    relay_factor: u8,
) -> KeyringResponse {
    let mut response = KeyringResponse {
        wan,
        datacenter,
        ..KeyringResponse::default()
    };
    let result = match (pool, op) {
        (_, Err(invalid)) => Err(invalid),
        (None, _) => Err("gossip is disabled on this agent".to_string()),
        (Some(pool), Ok(op)) => pool
            .keyring_relayed(op, relay_factor)
            .await
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(result) => {
            response.error = serf_error(&result);
            response.messages = result.messages;
            response.keys = counts(result.keys);
            response.primary_keys = counts(result.primary_keys);
            response.num_nodes = result.num_nodes as u64;
        }
        Err(error) => response.error = error,
    }
    response
}

fn counts(
    counts: std::collections::BTreeMap<String, usize>,
) -> std::collections::BTreeMap<String, u64> {
    counts.into_iter().map(|(k, n)| (k, n as u64)).collect()
}

/// Runs `operation` (already [`permit`]ted) over this server's pools and, unless it stays
/// here, in every other datacenter: the responses in Consul's order (WAN, this LAN, then
/// the other datacenters' in the router's order). The pools and the datacenters are asked
/// at once; an unreachable datacenter fails the whole operation.
pub async fn run(pools: Pools, operation: Operation) -> Result<Vec<KeyringResponse>, String> {
    let op = key_op(&operation);
    let relay_factor = operation.relay_factor.min(RELAY_FACTOR_MAX);
    let stays_here = operation.local_only || operation.forwarded || pools.wan.is_none();
    let mut remote = Vec::new();
    let mut wan = None;
    if !stays_here {
        let forwarded = Operation {
            forwarded: true,
            ..operation.clone()
        };
        let body = forwarded.encode();
        for datacenter in pools.deferred.router().datacenters() {
            if datacenter == pools.datacenter {
                continue;
            }
            let deferred = pools.deferred.clone();
            let body = body.clone();
            let retry = forwarded.retry();
            remote.push(monoio::spawn(async move {
                deferred
                    .call_datacenter(
                        &datacenter,
                        "Internal.KeyringOperation",
                        &body,
                        KEYRING_CALL_TIMEOUT,
                        retry,
                    )
                    .await
            }));
        }
        wan = Some(monoio::spawn(over_pool(
            pools.wan.clone(),
            true,
            pools.datacenter.clone(),
            op.clone(),
            relay_factor,
        )));
    }
    let lan = over_pool(pools.lan, false, pools.datacenter, op, relay_factor).await;
    let mut responses = Vec::new();
    if let Some(wan) = wan {
        responses.push(wan.await);
    }
    responses.push(lan);
    for answer in remote {
        let body = answer.await.map_err(|error| error.to_string())?;
        let theirs = read_keyring_responses(&body)
            .map_err(|error| format!("rpc error: malformed reply: {error}"))?;
        responses.extend(theirs);
    }
    Ok(responses)
}

/// `Internal.KeyringOperation` on the server port.
pub async fn keyring_operation(server: &Server, call: &TypedCall) -> Answer {
    let request = KeyringRequest::decode(&call.body).map_err(decode_error)?;
    let ctx = server.context();
    if request.local_only && request.operation != KeyringOperation::List.as_str() {
        return Err("argument error: LocalOnly can only be used for List operations".to_string());
    }
    let Some(kind) = KeyringOperation::parse(request.operation) else {
        return Err(format!(
            "Invalid keyring operation: {:?}",
            request.operation
        ));
    };
    let operation = Operation {
        operation: kind,
        key: request.key.to_string(),
        relay_factor: request.relay_factor,
        local_only: request.local_only,
        forwarded: request.forwarded,
        token: request.options.token.to_string(),
    };
    permit(ctx, &operation)?;
    let responses = run(Pools::of(ctx), operation).await?;
    let mut w = Writer::new();
    write_keyring_responses(&mut w, &QueryMeta::default(), &responses);
    Ok(w.into_inner())
}

/// On a client agent: `operation` as the call to a server; `answer` renders its responses.
pub fn ask_server(
    ctx: &Context,
    operation: &Operation,
    answer: impl FnOnce(&[KeyringResponse], &mut Reply) + 'static,
) -> Outcome {
    call(
        ctx,
        "",
        "Internal.KeyringOperation",
        operation.encode(),
        KEYRING_CALL_TIMEOUT,
        operation.retry(),
        move |body, reply| {
            let responses = read_keyring_responses(body).map_err(bad_reply)?;
            answer(&responses, reply);
            Ok(())
        },
    )
}

/// A server's refusal or failure as the HTTP error Consul's agent answers for it (403 for
/// a token's, 500 for the rest), the same on a server as through a client agent.
pub fn http_error(text: String) -> ApiError {
    error_of(CallError::Remote(text))
}
