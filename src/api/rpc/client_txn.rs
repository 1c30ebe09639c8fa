//! A client agent's transactions as Consul's typed calls: `PUT /v1/txn` is decoded and
//! pre-checked here as a server's endpoint does it (a malformed body is the same 400, a
//! pre-check failure the same 409, both without a call), then sent as `Txn.Apply` when an
//! operation writes and as `Txn.Read` otherwise, as Consul's `txn_endpoint.go` on the agent
//! sends them. The reply's results come back as the store's rows and are rendered by the
//! server's own renderer (`api::txn::write_outcome`); a read's `X-Consul-KnownLeader` and
//! `X-Consul-LastContact` come from its `QueryMeta`.

use super::client::{bad_reply, call, meta_of, query_options, read_timeout, write_in};
use crate::api::authz::request_secret;
use crate::api::txn::{read_headers, write_outcome};
use crate::api::{ApiError, Context, Outcome, Request};
use crate::cluster::servers::Retry;
use crate::consul::rpc::txn::{encode_apply, encode_read, read_response};
use crate::store::txn::TxnOp;

/// `Txn.Apply`: the operations, at least one a write, applied by the leader of
/// `datacenter` (empty: this one) at once.
pub fn apply(ctx: &Context, request: &Request, ops: &[TxnOp], datacenter: &str) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = encode_apply(datacenter, ops, &secret);
    // A transaction that may have reached a server is not sent again: it could apply twice.
    write_in(ctx, datacenter, "Txn.Apply", body, |body, reply| {
        let (_, outcome) = read_response(body).map_err(bad_reply)?;
        write_outcome(&outcome, b"", reply);
        Ok(())
    })
}

/// `Txn.Read`: read operations only, answered by a server of `datacenter` (empty: this
/// one) from one version, under the request's consistency mode.
pub fn read(
    ctx: &Context,
    request: &Request,
    ops: &[TxnOp],
    options: crate::api::QueryOptions,
    datacenter: &str,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = encode_read(datacenter, ops, &query_options(&options, &secret));
    call(
        ctx,
        datacenter,
        "Txn.Read",
        body,
        read_timeout(&options),
        Retry::Always,
        |body, reply| {
            let (meta, outcome) = read_response(body).map_err(bad_reply)?;
            write_outcome(&outcome, &read_headers(&meta_of(&meta)), reply);
            Ok(())
        },
    )
}

/// `PUT /v1/txn?dc=<other>`: decoded and pre-checked by the handler as for this
/// datacenter, then `Txn.Apply` or `Txn.Read` naming the other one
/// ([`super::client::across_datacenters`]); `None` for other paths.
pub fn across_datacenters(
    ctx: &Context,
    request: &Request,
    datacenter: &str,
) -> Option<Result<Outcome, ApiError>> {
    if request.path != "/v1/txn" {
        return None;
    }
    Some(crate::api::txn::across(ctx, request, datacenter))
}
