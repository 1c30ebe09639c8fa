//! Rendered bodies of blocking catalog and health queries, kept per shard thread for the
//! crowd of watchers one change wakes: the body is rendered once per query and store index
//! and copied to each. Identical woken requests share more (the whole answer, see
//! [`super::shared_answers`]); this cache serves the ones whose heads differ.

use std::cell::RefCell;
use std::rc::Rc;

/// How many rendered bodies a shard keeps.
const RESPONSE_CACHE_ENTRIES: usize = 16;
/// Bodies larger than this are not cached.
const RESPONSE_CACHE_BODY_BYTES_MAX: usize = 16 << 20;

struct CachedBody {
    key: Rc<str>,
    index: u64,
    pretty: bool,
    body: Rc<Vec<u8>>,
}

thread_local! {
    static RESPONSE_CACHE: RefCell<Vec<CachedBody>> = const { RefCell::new(Vec::new()) };
}

/// The body for `(key, store index, pretty)`, rendered by `render` on a miss. Bodies depend
/// only on the store version and the query, so a hit is always current. Callers use it for
/// blocking queries only: those are what wake in crowds on one version, while plain reads
/// should show the real cost of a query.
pub fn cached_body(
    key: &Rc<str>,
    index: u64,
    pretty: bool,
    render: impl FnOnce(&mut Vec<u8>),
) -> Rc<Vec<u8>> {
    let hit = RESPONSE_CACHE.with(|cache| {
        cache
            .borrow()
            .iter()
            .find(|e| e.index == index && e.pretty == pretty && *e.key == **key)
            .map(|e| e.body.clone())
    });
    if let Some(body) = hit {
        return body;
    }
    let mut body = Vec::with_capacity(4096);
    render(&mut body);
    let body = Rc::new(body);
    if body.len() <= RESPONSE_CACHE_BODY_BYTES_MAX {
        RESPONSE_CACHE.with(|cache| {
            let mut cache = cache.borrow_mut();
            // Entries for older versions of the same query are useless now.
            cache.retain(|e| *e.key != **key || e.pretty != pretty);
            if cache.len() >= RESPONSE_CACHE_ENTRIES {
                cache.remove(0);
            }
            cache.push(CachedBody {
                key: key.clone(),
                index,
                pretty,
                body: body.clone(),
            });
        });
    }
    body
}
