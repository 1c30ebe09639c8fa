//! `?cached` reads, answered as Consul's agent cache answers them: `X-Cache: MISS` the
//! first time an agent sees a request, `X-Cache: HIT` with `Age: <seconds>` afterwards, a
//! miss again when `Cache-Control: max-age=<s>` finds the entry older than that (or
//! `max-age=0` / `must-revalidate` asks for a fresh read), and 400 for `?cached` with
//! `?consistent` or for a malformed `Cache-Control`.
//!
//! Consul keeps the results of these reads (service health, catalog service instances and
//! the service list) in the agent and refreshes them in the background with blocking
//! queries, so a hit is at most as old as the last change plus the refresh lag; its `Age`
//! counts from that refresh. praetor's reads are always computed from the shard's current
//! store version, which is what a refreshed entry holds, so only the bookkeeping is kept:
//! for the agent (every shard shares it), each request's key with the instant its entry
//! was (re)fetched and the index it saw. A moved index is a background refresh (the entry counts as fetched now);
//! an entry is also refreshed after [`CACHE_REFRESH_TIMEOUT`], Consul's blocking refresh
//! timeout. `http_config.use_cache = false` turns the cache off: `?cached` is then ignored,
//! as Consul ignores it.
//!
//! Bounded: at most [`CACHE_ENTRIES_MAX`] keys; the oldest entry makes room.

use super::{ApiError, Query, QueryMeta, QueryOptions, Reply, Request};
use crate::proto::http;
use crate::shard::runtime::Consistency;
use crate::shard::watch::WatchSet;
use crate::store::{StoreVersion, Tables};
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// Most cached request keys the agent keeps.
pub const CACHE_ENTRIES_MAX: usize = 4096;
/// Consul's background refresh re-fetches an entry at least this often (its blocking
/// query's wait), so an unchanged entry's `Age` restarts from zero after it.
pub const CACHE_REFRESH_TIMEOUT: Duration = Duration::from_secs(600);

/// What a `?cached` answer says about the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheMeta {
    pub hit: bool,
    /// Seconds since the entry was fetched; sent on hits only, as Consul sends it.
    pub age_s: u64,
}

impl CacheMeta {
    pub fn write_headers(&self, headers: &mut Vec<u8>) {
        if self.hit {
            headers.extend_from_slice(b"X-Cache: HIT\r\nAge: ");
            http::push_u64(headers, self.age_s);
            headers.extend_from_slice(b"\r\n");
        } else {
            headers.extend_from_slice(b"X-Cache: MISS\r\n");
        }
    }
}

/// The `Cache-Control` directives Consul reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    pub max_age: Option<Duration>,
    pub must_revalidate: bool,
}

/// Parses `Cache-Control` as Consul does: comma-separated directives, case-insensitive,
/// `max-age=<seconds>` (0 means must revalidate), `must-revalidate`, `stale-if-error=<s>`
/// (checked, nothing to serve stale here); others are ignored. A number that is not one is
/// a 400.
pub fn parse_cache_control(value: Option<&str>) -> Result<CacheControl, ApiError> {
    let mut control = CacheControl::default();
    let Some(value) = value else {
        return Ok(control);
    };
    let seconds = |text: &str| -> Result<Duration, ApiError> {
        text.parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| ApiError::bad_request("Invalid Cache-Control header."))
    };
    for directive in value.split(',') {
        let directive = directive.trim().to_ascii_lowercase();
        if directive == "must-revalidate" {
            control.must_revalidate = true;
        } else if let Some(text) = directive.strip_prefix("max-age=") {
            let age = seconds(text)?;
            control.must_revalidate |= age.is_zero();
            control.max_age = Some(age);
        } else if let Some(text) = directive.strip_prefix("stale-if-error=") {
            seconds(text)?;
        }
    }
    Ok(control)
}

/// One entry: when it was last fetched and the index it answered.
#[derive(Clone, Copy, Debug)]
struct Entry {
    fetched_at: Instant,
    index: u64,
}

/// The agent's entries by request key, shared by every shard (a request may land on any of
/// them, and Consul's cache is the agent's). Copy-on-write behind an atomic pointer, so a
/// hit costs one load and no lock; only a miss or a refresh writes a new map.
static ENTRIES: LazyLock<ArcSwap<HashMap<String, Entry>>> =
    LazyLock::new(|| ArcSwap::from_pointee(HashMap::new()));

/// What an entry answers at `now` for an answer at `index`, if it can answer without
/// changing: a hit of an unchanged, unexpired entry young enough for `control`.
fn unchanged_hit(
    entry: &Entry,
    index: u64,
    control: CacheControl,
    now: Instant,
) -> Option<CacheMeta> {
    let age = now.saturating_duration_since(entry.fetched_at);
    let refreshed = entry.index != index || age >= CACHE_REFRESH_TIMEOUT;
    let too_old = control.must_revalidate || control.max_age.is_some_and(|max| age > max);
    (!refreshed && !too_old).then(|| CacheMeta {
        hit: true,
        age_s: age.as_secs_f64().round() as u64,
    })
}

/// Updates `entries` for a lookup of `key` that `unchanged_hit` could not answer.
fn update(
    entries: &mut HashMap<String, Entry>,
    key: &str,
    index: u64,
    control: CacheControl,
    now: Instant,
) -> CacheMeta {
    if let Some(entry) = entries.get_mut(key) {
        let age = now.saturating_duration_since(entry.fetched_at);
        if entry.index != index || age >= CACHE_REFRESH_TIMEOUT {
            // A background refresh: the entry holds this answer, fetched now.
            *entry = Entry {
                fetched_at: now,
                index,
            };
            if let Some(hit) = unchanged_hit(entry, index, control, now) {
                return hit;
            }
        }
    } else if entries.len() >= CACHE_ENTRIES_MAX {
        let oldest = entries
            .iter()
            .min_by_key(|(_, e)| e.fetched_at)
            .map(|(k, _)| k.clone())
            .expect("a full map has an oldest entry");
        entries.remove(&oldest);
    }
    entries.insert(
        key.to_string(),
        Entry {
            fetched_at: now,
            index,
        },
    );
    debug_assert!(entries.len() <= CACHE_ENTRIES_MAX);
    CacheMeta {
        hit: false,
        age_s: 0,
    }
}

/// Looks `key` up at `now` for an answer at `index`: a miss records a fresh entry.
fn lookup(key: &str, index: u64, control: CacheControl, now: Instant) -> CacheMeta {
    if let Some(hit) = ENTRIES
        .load()
        .get(key)
        .and_then(|entry| unchanged_hit(entry, index, control, now))
    {
        return hit;
    }
    let mut meta = CacheMeta {
        hit: false,
        age_s: 0,
    };
    ENTRIES.rcu(|current| {
        let mut entries = HashMap::clone(current);
        meta = update(&mut entries, key, index, control, now);
        entries
    });
    meta
}

/// The key of a request: its path and its parameters, without those that do not change
/// what is read (`cached`, blocking, formatting, the token).
fn request_key(request: &Request) -> String {
    let mut params: Vec<(&str, &str)> = request
        .query
        .iter()
        .filter(|(name, _)| !matches!(*name, "cached" | "index" | "wait" | "pretty" | "token"))
        .collect();
    params.sort_unstable();
    let mut key = String::with_capacity(request.path.len() + 32);
    key.push_str(request.path);
    for (name, value) in params {
        key.push('&');
        key.push_str(name);
        key.push('=');
        key.push_str(value);
    }
    key
}

/// A read answered through the cache's bookkeeping.
struct Cached<Q> {
    inner: Q,
    key: String,
    control: CacheControl,
}

impl<Q: Query> Query for Cached<Q> {
    fn evaluate(&self, tables: &Tables) -> (u64, WatchSet) {
        self.inner.evaluate(tables)
    }

    fn respond(&self, tables: &StoreVersion, mut meta: QueryMeta, reply: &mut Reply) {
        meta.cache = Some(lookup(&self.key, meta.index, self.control, Instant::now()));
        self.inner.respond(tables, meta, reply);
    }
}

/// Whether the request asks for the cache and this agent has it on (`http_config.use_cache`).
pub fn wanted(use_cache: bool, request: &Request) -> bool {
    use_cache && request.query.has("cached")
}

/// A `?cached` request's entry in the agent's cache: looked up once its answer's index is
/// known. What a typed read's answer (`api::rpc::client_catalog`) goes through, as a
/// locally answered read goes through [`run`].
pub struct CacheLookup {
    key: String,
    control: CacheControl,
}

impl CacheLookup {
    /// The request's entry, when it asks for the cache and this agent has it on; the
    /// request's conflicts (`?cached` with `?consistent`, a malformed `Cache-Control`) are
    /// Consul's 400s.
    pub fn of(
        ctx: &super::Context,
        request: &Request,
        options: &QueryOptions,
    ) -> Result<Option<CacheLookup>, ApiError> {
        if !wanted(ctx.config().http_use_cache, request) {
            return Ok(None);
        }
        if options.consistency == Consistency::Consistent {
            return Err(ApiError::bad_request(
                "Cannot specify ?cached with ?consistent, conflicting semantics.",
            ));
        }
        Ok(Some(CacheLookup {
            key: request_key(request),
            control: parse_cache_control(request.header("Cache-Control"))?,
        }))
    }

    /// What the cache says of an answer at `index`, now.
    pub fn meta(&self, index: u64) -> CacheMeta {
        lookup(&self.key, index, self.control, Instant::now())
    }
}

/// Runs `query` for a request of an endpoint Consul's agent cache serves: through the cache
/// when the request asks for it, plainly otherwise.
pub fn run<Q: Query + 'static>(
    ctx: &super::Context,
    request: &Request,
    query: Q,
    options: QueryOptions,
    reply: &mut Reply,
) -> Result<super::Outcome, ApiError> {
    let Some(CacheLookup { key, control }) = CacheLookup::of(ctx, request, &options)? else {
        return super::run_query(ctx, query, options, reply);
    };
    let cached = Cached {
        inner: query,
        key,
        control,
    };
    super::run_query(ctx, cached, options, reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control_is_read_as_consul_reads_it() {
        assert_eq!(parse_cache_control(None).unwrap(), CacheControl::default());
        let c = parse_cache_control(Some("Max-Age=30, no-cache")).unwrap();
        assert_eq!(c.max_age, Some(Duration::from_secs(30)));
        assert!(!c.must_revalidate);
        assert!(
            parse_cache_control(Some("max-age=0"))
                .unwrap()
                .must_revalidate
        );
        assert!(
            parse_cache_control(Some("must-revalidate"))
                .unwrap()
                .must_revalidate
        );
        assert_eq!(
            parse_cache_control(Some("max-age=soon")).unwrap_err(),
            ApiError::bad_request("Invalid Cache-Control header.")
        );
        assert!(parse_cache_control(Some("stale-if-error=x")).is_err());
    }

    #[test]
    fn misses_then_hits_age_and_refresh_on_a_new_index() {
        let start = Instant::now();
        let none = CacheControl::default();
        let key = "/v1/test/misses_then_hits";
        assert!(!lookup(key, 5, none, start).hit);
        let later = start + Duration::from_secs(7);
        assert_eq!(
            lookup(key, 5, none, later),
            CacheMeta {
                hit: true,
                age_s: 7
            }
        );
        let max_age = CacheControl {
            max_age: Some(Duration::from_secs(3)),
            must_revalidate: false,
        };
        assert!(!lookup(key, 5, max_age, later).hit, "older than max-age");
        assert_eq!(
            lookup(key, 5, none, later),
            CacheMeta {
                hit: true,
                age_s: 0
            }
        );
        // A moved index is a background refresh: still a hit, fetched just now.
        let refreshed = later + Duration::from_secs(4);
        assert_eq!(
            lookup(key, 6, none, refreshed),
            CacheMeta {
                hit: true,
                age_s: 0
            }
        );
    }
}
