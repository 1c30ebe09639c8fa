//! DNS: Consul's names answered from a store version, with a per-shard answer cache.
//!
//! [`handle_message`] is the whole path of one query, independent of the transport: decode
//! (`proto::dns`), validate (opcode, class, type, EDNS version), look the question up in the
//! shard's [`cache::AnswerCache`], on a miss resolve it against the current store version
//! through [`view::CatalogView`] ([`resolve`]), encode and cache the answer, and assemble the
//! response for this query's transport and EDNS size ([`answer`]). Questions outside the
//! configured domains go to the recursors ([`recursor`]), which the server runs as separate
//! tasks so that a slow upstream never delays other queries.
//!
//! On a client agent, which has no store, the view is the rows a server sent ([`client`],
//! over the protocol in [`remote`]); a miss comes back as [`Handled::Fetch`], and the socket
//! loop answers the message again once the rows arrived. Hits take the same path as on a
//! server.
//!
//! The shard's sockets live in [`server`]; resolution does no socket I/O except in
//! [`recursor`] and [`client`].

pub mod answer;
pub mod cache;
pub mod client;
pub mod elsewhere;
pub mod name;
pub mod recursor;
pub mod remote;
pub mod resolve;
pub mod server;
pub mod store_view;
pub mod view;

use crate::config::DnsConfig;
use crate::proto::dns::{
    self, class, rcode, rtype, DecodeError, Query, RequestHeader, MESSAGE_BYTES_MAX,
    UDP_PAYLOAD_DEFAULT_BYTES,
};
use answer::{EncodedAnswer, ResponseLimits, ShuffleRng};
use cache::{cache_key, AnswerCache, CACHE_KEY_BYTES_MAX};
use name::Domains;
use resolve::{LocalAgent, Resolution, Resolver};
use std::rc::Rc;
use view::{CatalogView, ReadSet};

/// Consul's hard cap on answers in a plain (non-EDNS) UDP response, whatever
/// `udp_answer_limit` says.
pub const UDP_ANSWERS_MAX: usize = 8;
/// Largest UDP response: the IPv4 datagram limit less headers, as Consul caps EDNS sizes.
pub const UDP_RESPONSE_BYTES_MAX: usize = 65_535 - 68;

/// Settings shared by every shard, fixed at startup.
#[derive(Clone, Debug)]
pub struct DnsSettings {
    pub config: DnsConfig,
    pub domains: Domains,
    pub local: LocalAgent,
}

impl DnsSettings {
    pub fn new(config: DnsConfig, local: LocalAgent) -> DnsSettings {
        let domains = Domains::new(&config.domain, config.alt_domain.as_deref());
        DnsSettings {
            config,
            domains,
            local,
        }
    }
    pub fn recursion_available(&self) -> bool {
        !self.config.recursors.is_empty()
    }
}

/// Per-shard DNS state: the answer cache and the scratch space of response assembly.
pub struct ShardDns {
    pub cache: AnswerCache,
    rng: ShuffleRng,
    order: Vec<u32>,
}

impl ShardDns {
    pub fn new(seed: u64) -> ShardDns {
        ShardDns {
            cache: AnswerCache::new(),
            rng: ShuffleRng::new(seed),
            order: Vec::new(),
        }
    }
}

/// How the query arrived; decides the size limits of the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// What to do after [`handle_message`].
#[derive(Debug)]
pub enum Handled {
    /// Send the response now in the output buffer.
    Reply,
    /// Send nothing (not a query, or too short to answer).
    Drop,
    /// Forward this query to the recursors.
    Recurse(Box<Query>),
    /// A client agent lacks catalog rows this question needs: fetch them from a server,
    /// then answer the message again with them at hand.
    Fetch(Box<Query>, Vec<remote::Lookup>),
}

/// What a resolution against a [`VersionSource`]'s view may do with its answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion {
    /// The view held everything the resolution read, as exact as the cache's invalidation.
    Cacheable,
    /// Complete, but read rows that nothing will invalidate: answer once, do not cache.
    Uncacheable,
    /// The view lacked these rows; the answer is not to be sent.
    Missing(Vec<remote::Lookup>),
}

/// Where resolution reads from on a cache miss: the shard's current version. Fetching it
/// must not process shard messages (the caller has already decided the query may be served
/// here, catching up first when stale reads are disallowed).
pub trait VersionSource {
    type View: CatalogView;
    fn version(&self) -> Self::View;
    /// After a resolution against `view`: whether it had everything, and may be cached. A
    /// store version always does.
    fn completion(&self, _view: &Self::View) -> Completion {
        Completion::Cacheable
    }
}

/// The response size limits for a query.
pub fn response_limits(
    settings: &DnsSettings,
    query: &Query,
    transport: Transport,
) -> ResponseLimits {
    let config = &settings.config;
    let (message_bytes_max, answers_max) = match transport {
        Transport::Tcp => (MESSAGE_BYTES_MAX, None),
        Transport::Udp => {
            let size = query
                .edns
                .map_or(UDP_PAYLOAD_DEFAULT_BYTES, |e| {
                    (e.udp_payload_bytes as usize).max(UDP_PAYLOAD_DEFAULT_BYTES)
                })
                .min(UDP_RESPONSE_BYTES_MAX);
            let answers = (size == UDP_PAYLOAD_DEFAULT_BYTES)
                .then(|| config.udp_answer_limit.clamp(1, UDP_ANSWERS_MAX));
            (size, answers)
        }
    };
    ResponseLimits {
        message_bytes_max,
        answers_max,
        set_truncated: config.enable_truncate,
        recursion_available: settings.recursion_available(),
    }
}

/// Answers one DNS message into `out`. `may_serve` is false when this server cannot answer
/// in-domain questions (stale reads disallowed and no leader here): SERVFAIL.
pub fn handle_message<S: VersionSource>(
    settings: &DnsSettings,
    state: &mut ShardDns,
    may_serve: bool,
    source: &S,
    message: &[u8],
    transport: Transport,
    out: &mut Vec<u8>,
) -> Handled {
    let recursion_available = settings.recursion_available();
    let query = match dns::decode(message) {
        Ok(query) => query,
        Err(DecodeError::TooShort | DecodeError::NotAQuery) => return Handled::Drop,
        Err(error) => {
            let header = RequestHeader::read(message).expect("decoders check the header length");
            let code = match error {
                DecodeError::NotImplemented(_) => rcode::NOTIMP,
                _ => rcode::FORMERR,
            };
            answer::write_header_only_response(header.id, header.flags, code, out);
            return Handled::Reply;
        }
    };
    if query.edns.is_some_and(|e| e.version > 0) {
        answer::write_bare_response(&query, rcode::BADVERS, false, recursion_available, out);
        return Handled::Reply;
    }
    match query.qtype {
        rtype::AXFR | rtype::IXFR | rtype::MAILA | rtype::MAILB => {
            answer::write_bare_response(&query, rcode::NOTIMP, false, recursion_available, out);
            return Handled::Reply;
        }
        0 | rtype::OPT => {
            answer::write_bare_response(&query, rcode::FORMERR, false, recursion_available, out);
            return Handled::Reply;
        }
        _ => {}
    }
    if query.qclass != class::IN && query.qclass != class::ANY {
        answer::write_bare_response(&query, rcode::REFUSED, false, recursion_available, out);
        return Handled::Reply;
    }
    if !may_serve {
        answer::write_bare_response(&query, rcode::SERVFAIL, false, recursion_available, out);
        return Handled::Reply;
    }
    let limits = response_limits(settings, &query, transport);
    let mut key_buffer = [0u8; CACHE_KEY_BYTES_MAX];
    let key = cache_key(
        query.name.as_bytes(),
        query.qtype,
        query.qclass,
        &mut key_buffer,
    );
    if let Some(encoded) = state.cache.get(key) {
        encoded.assemble(&query, &limits, &mut state.rng, &mut state.order, out);
        return Handled::Reply;
    }
    // Only a miss needs the lowercased name as a name (the key lowercased its own copy).
    let lower = query.name.to_lowercase();
    let resolver = Resolver {
        config: &settings.config,
        domains: &settings.domains,
        local: &settings.local,
        serial: unix_seconds(),
    };
    let mut reads = ReadSet::default();
    let view = source.version();
    let resolution = resolver.resolve(&lower, query.qtype, &view, &mut reads);
    let cacheable = match source.completion(&view) {
        Completion::Cacheable => true,
        Completion::Uncacheable => false,
        Completion::Missing(lookups) => {
            debug_assert!(!lookups.is_empty(), "missing rows are named");
            return Handled::Fetch(Box::new(query), lookups);
        }
    };
    match resolution {
        Resolution::Answer(answer) => {
            let encoded = Rc::new(EncodedAnswer::encode(&answer, &lower));
            encoded.assemble(&query, &limits, &mut state.rng, &mut state.order, out);
            if cacheable {
                state.cache.insert(key, encoded, &reads);
            }
            Handled::Reply
        }
        Resolution::Recurse => Handled::Recurse(Box::new(query)),
        Resolution::Refused => {
            answer::write_bare_response(&query, rcode::REFUSED, false, recursion_available, out);
            Handled::Reply
        }
    }
}

fn unix_seconds() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
