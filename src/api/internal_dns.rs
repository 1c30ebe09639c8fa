//! The two internal endpoints through which a client agent answers DNS (see `dns::remote`):
//!
//! - `PUT /v1/internal/praetor/dns-lookup` — catalog lookups for one resolution, answered
//!   from one store version (`?stale` reads this server's version; without it the leader's,
//!   as any read);
//! - `GET /v1/internal/praetor/dns-changes?index=N` — a blocking read of the DNS-table
//!   changes after `N`, from this shard's ring of recent changes, or a reset.
//!
//! A client agent's own HTTP server forwards both to its server, like every store read.
//! Both answer msgpack bodies only praetor reads.

use super::{
    query_options, run_query, ApiError, Context, Outcome, Query, QueryMeta, Reply, Request,
};
use crate::dns::remote::{self, Lookup, RecentChanges, FEED_TABLES};
use crate::dns::view::AclFiltered;
use crate::shard::watch::WatchSet;
use crate::store::acl::authorizer::Authorizer;
use crate::store::{StoreVersion, Tables};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

const MSGPACK: Option<&str> = Some("application/msgpack");

/// `PUT /v1/internal/praetor/dns-lookup`.
pub fn lookup(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    if ctx.is_client() {
        return Ok(Outcome::Forward);
    }
    let lookups = remote::decode_lookups(request.body).map_err(ApiError::bad_request)?;
    let options = query_options(ctx, &request.query)?;
    let authorizer = request.acl.get().map(|a| a.authorizer.clone());
    run_query(
        ctx,
        LookupQuery {
            lookups,
            authorizer,
        },
        options,
        reply,
    )
}

struct LookupQuery {
    lookups: Vec<Lookup>,
    /// The client's DNS token (its `default` token): rows it may not read are left out, as
    /// a server's own DNS leaves them out.
    authorizer: Option<Arc<Authorizer>>,
}

impl Query for LookupQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (tables.index, WatchSet::new())
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let view = AclFiltered {
            inner: tables.clone(),
            authorizer: self.authorizer.clone(),
        };
        let body = remote::answer_lookups(&view, tables.index, &self.lookups);
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        reply.send(200, MSGPACK, &headers, &body);
    }
}

/// `GET /v1/internal/praetor/dns-changes?index=N&wait=…`.
pub fn changes(ctx: &Context, request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    if ctx.is_client() {
        return Ok(Outcome::Forward);
    }
    let options = query_options(ctx, &request.query)?;
    let query = ChangesQuery {
        ring: ctx.dns_changes().clone(),
        after: options.min_index,
    };
    run_query(ctx, query, options, reply)
}

struct ChangesQuery {
    ring: Rc<RefCell<RecentChanges>>,
    after: u64,
}

impl Query for ChangesQuery {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        let mut watched = WatchSet::new();
        for table in FEED_TABLES {
            watched.add_table(table);
        }
        (
            self.ring.borrow().wake_index(self.after, tables.index),
            watched,
        )
    }
    fn respond(&self, tables: &StoreVersion, meta: QueryMeta, reply: &mut Reply) {
        let body = self.ring.borrow().since(self.after, tables.index).encode();
        let mut headers = Vec::with_capacity(160);
        meta.write_headers(&mut headers);
        reply.send(200, MSGPACK, &headers, &body);
    }
}
