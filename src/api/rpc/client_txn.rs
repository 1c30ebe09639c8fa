//! A client agent's transactions as Consul's typed calls: `PUT /v1/txn` is decoded and
//! pre-checked here as a server's endpoint does it (a malformed body is the same 400, a
//! pre-check failure the same 409, both without a call), then sent as `Txn.Apply` when an
//! operation writes and as `Txn.Read` otherwise, as Consul's `txn_endpoint.go` on the agent
//! sends them. The reply's results come back as the store's rows and are rendered by the
//! server's own renderer (`api::txn::write_outcome`); a read's `X-Consul-KnownLeader` and
//! `X-Consul-LastContact` come from its `QueryMeta`.

use super::client::{bad_reply, meta_of, query_options, read_call, write};
use crate::api::authz::request_secret;
use crate::api::txn::{read_headers, write_outcome};
use crate::api::{Context, Outcome, Request};
use crate::consul::rpc::txn::{encode_apply, encode_read, read_response};
use crate::store::txn::TxnOp;

/// `Txn.Apply`: the operations, at least one a write, applied by the leader at once.
pub fn apply(ctx: &Context, request: &Request, ops: &[TxnOp]) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = encode_apply(ops, &secret);
    // A transaction that may have reached a server is not sent again: it could apply twice.
    write(ctx, "Txn.Apply", body, |body, reply| {
        let (_, outcome) = read_response(body).map_err(bad_reply)?;
        write_outcome(&outcome, b"", reply);
        Ok(())
    })
}

/// `Txn.Read`: read operations only, answered by a server from one version, under the
/// request's consistency mode.
pub fn read(
    ctx: &Context,
    request: &Request,
    ops: &[TxnOp],
    options: crate::api::QueryOptions,
) -> Outcome {
    let secret = request_secret(ctx, request);
    let body = encode_read(ops, &query_options(&options, &secret));
    read_call(ctx, "Txn.Read", body, &options, |body, reply| {
        let (meta, outcome) = read_response(body).map_err(bad_reply)?;
        write_outcome(&outcome, &read_headers(&meta_of(&meta)), reply);
        Ok(())
    })
}

/// The requests of this family that name another datacenter (`?dc=`), as their typed
/// calls to a server there ([`super::client::across_datacenters`]); `None` for the others.
pub fn across_datacenters(
    ctx: &crate::api::Context,
    request: &crate::api::Request,
    datacenter: &str,
) -> Option<Result<crate::api::Outcome, crate::api::ApiError>> {
    let _ = (ctx, request, datacenter);
    None
}
