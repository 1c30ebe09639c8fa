//! `Praetor.DNSLookup` and `Praetor.DNSChanges`: what a praetor client agent asks a server
//! so that it can answer DNS itself (`dns::client`), and what a server asks another
//! datacenter's server for `<name>.service.<dc>` and `<node>.node.<dc>` (`dns::elsewhere`).
//! Praetor's own methods, not Consul's (`dns::remote::LookupCall` says why); their requests
//! are shaped as Consul's are, so they are routed as Consul's calls are: a `Datacenter`
//! naming another datacenter hands the call there, `AllowStale` lets this server answer
//! from its own version, anything else is answered under the leader's lease.
//!
//! - `Praetor.DNSLookup` answers a batch of lookups from one store version, filtered by the
//!   call's token as the server's own DNS filters by its token; the reply's `Results` are
//!   the encoded `dns::remote::LookupReply`, whose index is that version's.
//! - `Praetor.DNSChanges` is the change feed: a blocking read (`MinQueryIndex` is the
//!   reader's position) of the DNS-table changes after it, from this shard's ring of recent
//!   changes, or a reset; its reply's `Changes` are the encoded `dns::remote::FeedReply`.

use super::{decode_error, read, read_here, Answer, Read};
use crate::api::server::Server;
use crate::consul::rpc::{each_field, QueryMeta, QueryOptions};
use crate::dns::remote::{self, Lookup, RecentChanges, FEED_TABLES};
use crate::dns::view::AclFiltered;
use crate::proto::msgpack::{Reader, Writer};
use crate::shard::rpc_server::TypedCall;
use crate::shard::watch::WatchSet;
use crate::store::acl::authorizer::Authorizer;
use crate::store::{StoreVersion, Tables};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// A reply: `QueryMeta` and the payload in `field`.
fn reply_with(meta: &QueryMeta, field: &'static str, payload: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &[field], |_, w| w.bytes(payload));
    w.into_inner()
}

struct LookupRead {
    lookups: Vec<Lookup>,
    /// The caller's token (a client agent's `default` token): rows it may not read are
    /// left out, as the server's own DNS leaves them out.
    authorizer: Option<Arc<Authorizer>>,
}

impl Read for LookupRead {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        (tables.index, WatchSet::new())
    }

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let view = AclFiltered {
            inner: version.clone(),
            authorizer: self.authorizer.clone(),
        };
        let results = remote::answer_lookups(&view, version.index, &self.lookups);
        Ok(reply_with(meta, remote::LOOKUP_REPLY_FIELD, &results))
    }
}

/// `Praetor.DNSLookup`: `{Datacenter, Lookups, QueryOptions…}`.
pub async fn lookup(server: &Server, call: &TypedCall) -> Answer {
    let mut datacenter = "";
    let mut lookups: &[u8] = &[];
    let mut options = QueryOptions::default();
    each_field(&mut Reader::new(&call.body), |name, r| {
        match name {
            "Datacenter" => datacenter = r.str()?,
            "Lookups" => lookups = r.bytes()?,
            _ => return options.field(name, r),
        }
        Ok(true)
    })
    .map_err(decode_error)?;
    let authz = match read_here(server, call, datacenter, &options).await {
        Ok(authz) => authz,
        Err(answer) => return answer,
    };
    let lookups = remote::decode_lookups(lookups)?;
    let query = LookupRead {
        lookups,
        authorizer: authz.map(|authz| authz.authorizer.clone()),
    };
    read(server, call, &options, query).await
}

struct ChangesRead {
    ring: Rc<RefCell<RecentChanges>>,
    after: u64,
}

impl Read for ChangesRead {
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

    fn reply(&self, version: &StoreVersion, meta: &QueryMeta) -> Answer {
        let changes = self.ring.borrow().since(self.after, version.index).encode();
        Ok(reply_with(meta, remote::CHANGES_REPLY_FIELD, &changes))
    }
}

/// `Praetor.DNSChanges`: `QueryOptions` alone, `MinQueryIndex` the reader's position.
pub async fn changes(server: &Server, call: &TypedCall) -> Answer {
    let mut options = QueryOptions::default();
    each_field(&mut Reader::new(&call.body), |name, r| {
        options.field(name, r)
    })
    .map_err(decode_error)?;
    // The changes name keys only, never rows: the token is resolved (an unknown one is
    // refused) and nothing is filtered, as the HTTP feed was.
    if let Err(answer) = read_here(server, call, "", &options).await {
        return answer;
    }
    let query = ChangesRead {
        ring: server.context().dns_changes().clone(),
        after: options.min_query_index,
    };
    read(server, call, &options, query).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_agents_requests_decode_as_a_server_reads_them() {
        let lookups = [Lookup::service_instances("web"), Lookup::node("n1")];
        let body = remote::LookupCall {
            datacenter: "dc2",
            lookups: &lookups,
            stale_within: Some(Duration::from_secs(5)),
            token: "secret",
        }
        .encode();
        let mut datacenter = "";
        let mut sent: &[u8] = &[];
        let mut options = QueryOptions::default();
        each_field(&mut Reader::new(&body), |name, r| {
            match name {
                "Datacenter" => datacenter = r.str()?,
                "Lookups" => sent = r.bytes()?,
                _ => return options.field(name, r),
            }
            Ok(true)
        })
        .unwrap();
        assert_eq!(datacenter, "dc2");
        assert_eq!(remote::decode_lookups(sent).unwrap(), lookups);
        assert_eq!(options.token, "secret");
        assert_eq!(options.consistency_level(), "stale");
        assert_eq!(options.max_stale_duration_ns, 5_000_000_000);

        let body = remote::changes_call_body(42, Duration::from_secs(10), "");
        let mut options = QueryOptions::default();
        each_field(&mut Reader::new(&body), |name, r| options.field(name, r)).unwrap();
        assert_eq!(options.min_query_index, 42);
        assert_eq!(options.max_query_time_ns, 10_000_000_000);
        assert!(options.allow_stale);

        // A reply reads back to its payload, `QueryMeta` skipped.
        let meta = QueryMeta {
            index: 7,
            consistency_level: "stale",
            ..QueryMeta::default()
        };
        let reply = reply_with(&meta, remote::CHANGES_REPLY_FIELD, b"payload");
        assert_eq!(
            remote::reply_payload(&reply, remote::CHANGES_REPLY_FIELD).unwrap(),
            b"payload"
        );
        assert!(remote::reply_payload(&reply, remote::LOOKUP_REPLY_FIELD).is_err());
    }
}
