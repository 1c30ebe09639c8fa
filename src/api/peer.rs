//! `?peer=<name>` on the catalog and health reads: rows a cluster peer exported to this
//! cluster. praetor has no cluster peering, so no such rows exist and every such read is
//! answered as Consul CE answers one for a peer it has imported nothing from: the empty
//! answer of the same read (`[]`, `null`, or a node-services object without a node), with
//! the index and blocking behaviour of the local read, so a client watching a peer's
//! service blocks and wakes as it would against Consul. An empty `peer` names nothing.
//!
//! On a client agent (or a follower, or with `?dc=`) the read goes as the local read's
//! typed call, and its reply's `QueryMeta` heads the same empty answer
//! (`rpc::client_catalog`).
//!
//! Writes that name a peer are refused where they are decoded
//! (`consul::registration::PEER_REGISTRATION_REFUSED`); listing service names from a peer
//! is refused by `catalog::services`, as Consul refuses it.

use super::{
    run_query, ApiError, Context, Outcome, Query, QueryMeta, QueryOptions, Reply, Request,
};
use crate::consul::json::JsonWriter;
use crate::shard::watch::WatchSet;
use crate::store::{StoreVersion, Tables};

/// The peer a request names with `?peer=`, if any.
pub fn named<'r>(request: &'r Request) -> Option<&'r str> {
    request.query.get("peer").filter(|peer| !peer.is_empty())
}

/// The shape of a read's answer when it finds nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Empty {
    /// `[]`: lists of nodes, service instances and checks.
    List,
    /// `null`: `/v1/catalog/node/<n>` for a node that does not exist.
    Null,
    /// `{"Node": null, "Services": []}`: `/v1/catalog/node-services/<n>`.
    NodeServices,
}

impl Empty {
    /// The empty answer of the read at `path`: a node's services or a node as Consul
    /// answers them when nothing is found, a list for every other read.
    pub fn of_path(path: &str) -> Empty {
        if path.starts_with("/v1/catalog/node-services/") {
            Empty::NodeServices
        } else if path.starts_with("/v1/catalog/node/") {
            Empty::Null
        } else {
            Empty::List
        }
    }

    pub fn body(self, pretty: bool) -> Vec<u8> {
        let mut body = Vec::with_capacity(64);
        if self == Empty::Null {
            body.extend_from_slice(if pretty { b"null\n" } else { b"null" });
            return body;
        }
        let mut w = JsonWriter::new(&mut body, pretty);
        if self == Empty::List {
            w.begin_array();
            w.end_array();
        } else {
            w.begin_object();
            w.field_null("Node");
            w.field_array("Services");
            w.end_array();
            w.end_object();
        }
        w.finish();
        body
    }
}

/// A read of what a peer exported: the local read's index and watches, an empty answer.
struct Imported<Q> {
    local: Q,
    empty: Empty,
}

impl<Q: Query> Query for Imported<Q> {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        self.local.evaluate(tables)
    }

    fn respond(&self, _tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        reply.json_bytes(200, &headers, &self.empty.body(reply.pretty));
    }
}

/// Runs `query`, or, when the request names a peer, its peer form answering `empty`.
pub fn run<Q: Query + 'static>(
    ctx: &Context,
    request: &Request,
    query: Q,
    options: QueryOptions,
    empty: Empty,
    reply: &mut Reply,
) -> Result<Outcome, ApiError> {
    match named(request) {
        None => run_query(ctx, query, options, reply),
        Some(_) => run_query(
            ctx,
            Imported {
                local: query,
                empty,
            },
            options,
            reply,
        ),
    }
}
