//! A fill-once cache of byte renderings attached to an immutable row, shared by every
//! thread that reads the row's store version.
//!
//! Rows never change after they are built (a write builds new ones), so a rendering made
//! from a row stays correct for as long as the row exists. The API layer renders a row's
//! JSON once and copies it into every later answer. Filling is lock-free: the slot array and
//! each slot are atomic pointers installed with compare-and-swap; two threads that fill the
//! same slot at once both succeed and one copy is dropped. Nobody ever waits.
//!
//! Layout is chosen for memory first and the read path second. Most rows are never read
//! (or only in one form), so a cache costs one null pointer until its first fill, which
//! allocates the slot array; each slot points straight at a blob — a length and the bytes
//! in one allocation — so reaching a rendering is two pointer hops.
//! Copies of a row (persistent maps copy rows along changed paths) share the slot array by
//! count, so a rendering made through any copy serves them all.
//!
//! The store only keeps the bytes; what each slot means is the API layer's business.

use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::{fence, AtomicPtr, AtomicUsize, Ordering};

/// Slots per cache.
pub const RENDER_SLOTS: usize = 4;

/// Header of a blob allocation; the bytes follow it. A blob belongs to exactly one slot
/// array, so it needs no count of its own.
#[repr(C)]
struct BlobHeader {
    len: usize,
}

const HEADER: usize = std::mem::size_of::<BlobHeader>();

fn layout(len: usize) -> Layout {
    Layout::from_size_align(HEADER + len, std::mem::align_of::<BlobHeader>())
        .expect("rendering sizes are far below isize::MAX")
}

/// Allocates a blob holding `bytes`.
fn blob_new(bytes: &[u8]) -> *mut BlobHeader {
    let layout = layout(bytes.len());
    // SAFETY: the layout is non-zero-sized (it includes the header); the header is written
    // before use and the bytes are copied into the space that follows it.
    unsafe {
        let ptr = alloc(layout) as *mut BlobHeader;
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        ptr.write(BlobHeader { len: bytes.len() });
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (ptr as *mut u8).add(HEADER), bytes.len());
        ptr
    }
}

/// The bytes of a live blob.
///
/// # Safety
/// `ptr` must point to a blob that is not freed during `'a`.
unsafe fn blob_bytes<'a>(ptr: *const BlobHeader) -> &'a [u8] {
    // SAFETY: guaranteed by the caller; the bytes follow the header.
    unsafe { std::slice::from_raw_parts((ptr as *const u8).add(HEADER), (*ptr).len) }
}

/// Frees a blob.
///
/// # Safety
/// `ptr` must be a live blob that nothing reads any more.
unsafe fn blob_free(ptr: *mut BlobHeader) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let len = (*ptr).len;
        dealloc(ptr as *mut u8, layout(len));
    }
}

/// The slot array of a filled cache, shared by copies of the row.
struct Slots {
    count: AtomicUsize,
    blobs: [AtomicPtr<BlobHeader>; RENDER_SLOTS],
}

/// Per-row renderings: one pointer, null until the first rendering is stored.
pub struct RenderCache {
    slots: AtomicPtr<Slots>,
}

impl Default for RenderCache {
    fn default() -> Self {
        RenderCache {
            slots: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

impl RenderCache {
    /// The slot array, allocated by the first caller that needs it.
    fn slots(&self) -> &Slots {
        let current = self.slots.load(Ordering::Acquire);
        if !current.is_null() {
            // SAFETY: a published slot array keeps the cache's reference until the cache
            // drops, which needs `&mut self`.
            return unsafe { &*current };
        }
        let fresh = Box::into_raw(Box::new(Slots {
            count: AtomicUsize::new(1),
            blobs: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }));
        match self.slots.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: just published, as above.
            Ok(_) => unsafe { &*fresh },
            Err(existing) => {
                // SAFETY: `fresh` was never published and holds no blobs.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: published by another thread, as above.
                unsafe { &*existing }
            }
        }
    }

    /// The rendering in `slot`, made by `render` if this is the first request for it. The
    /// bytes live as long as the cache.
    pub fn get_or_render(&self, slot: usize, render: impl FnOnce() -> Vec<u8>) -> &[u8] {
        let cell = &self.slots().blobs[slot];
        let current = cell.load(Ordering::Acquire);
        if !current.is_null() {
            // SAFETY: a published blob lives until its slot array is freed, after the last
            // cache sharing the array drops (`&self` outlives the slice).
            return unsafe { blob_bytes(current) };
        }
        let fresh = blob_new(&render());
        match cell.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: just published, as above.
            Ok(_) => unsafe { blob_bytes(fresh) },
            Err(existing) => {
                // SAFETY: `fresh` was never published; nobody else has seen it.
                unsafe { blob_free(fresh) };
                // SAFETY: published by another thread, as above.
                unsafe { blob_bytes(existing) }
            }
        }
    }

    /// The rendering in `slot` if there is one.
    pub fn get(&self, slot: usize) -> Option<&[u8]> {
        let slots = self.slots.load(Ordering::Acquire);
        if slots.is_null() {
            return None;
        }
        // SAFETY: see `slots` and `get_or_render`.
        let current = unsafe { &*slots }.blobs[slot].load(Ordering::Acquire);
        (!current.is_null()).then(|| unsafe { blob_bytes(current) })
    }
}

impl Clone for RenderCache {
    /// A copy of a row shares its renderings: they describe the same content.
    fn clone(&self) -> Self {
        let slots = self.slots.load(Ordering::Acquire);
        if !slots.is_null() {
            // SAFETY: the array is live (`self` holds a reference); we take another.
            unsafe { (*slots).count.fetch_add(1, Ordering::Relaxed) };
        }
        RenderCache {
            slots: AtomicPtr::new(slots),
        }
    }
}

impl Drop for RenderCache {
    fn drop(&mut self) {
        let slots = *self.slots.get_mut();
        if slots.is_null() {
            return;
        }
        // SAFETY: the cache owns one reference to a live slot array.
        unsafe {
            if (*slots).count.fetch_sub(1, Ordering::Release) != 1 {
                return;
            }
            fence(Ordering::Acquire);
            let mut array = Box::from_raw(slots);
            for blob in array.blobs.iter_mut() {
                let blob = *blob.get_mut();
                if !blob.is_null() {
                    // The array owns the blobs it holds, and it is going away.
                    blob_free(blob);
                }
            }
        }
    }
}

impl std::fmt::Debug for RenderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let filled = (0..RENDER_SLOTS).filter(|s| self.get(*s).is_some()).count();
        write!(f, "RenderCache({filled} filled)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fills_once_and_survives_clones() {
        let cache = RenderCache::default();
        assert!(cache.get(1).is_none());
        let renders = AtomicUsize::new(0);
        let render = || {
            renders.fetch_add(1, Ordering::SeqCst);
            b"{\"a\":1}".to_vec()
        };
        assert_eq!(cache.get_or_render(1, render), b"{\"a\":1}");
        assert_eq!(cache.get_or_render(1, render), b"{\"a\":1}");
        assert_eq!(renders.load(Ordering::SeqCst), 1);
        assert_eq!(cache.get_or_render(0, Vec::new), b"");
        let copy = cache.clone();
        assert_eq!(copy.get(1), Some(&b"{\"a\":1}"[..]));
        drop(cache);
        assert_eq!(copy.get(1), Some(&b"{\"a\":1}"[..]));
        assert_eq!(copy.get(0), Some(&b""[..]));
    }

    #[test]
    fn copies_share_later_fills_and_cost_one_pointer() {
        assert_eq!(std::mem::size_of::<RenderCache>(), 8);
        let unfilled = RenderCache::default();
        let early_copy = unfilled.clone();
        assert_eq!(unfilled.get_or_render(3, || b"x".to_vec()), b"x");
        // A copy made before the slot array existed has its own.
        assert!(early_copy.get(3).is_none());
        let copy = unfilled.clone();
        assert_eq!(unfilled.get_or_render(2, || b"pretty".to_vec()), b"pretty");
        assert_eq!(
            copy.get(2),
            Some(&b"pretty"[..]),
            "fills after the copy are shared"
        );
        assert_eq!(
            copy.get_or_render(2, || panic!("already rendered")),
            b"pretty"
        );
        drop(unfilled);
        assert_eq!(copy.get(3), Some(&b"x"[..]));
    }

    #[test]
    fn concurrent_fills_agree() {
        let cache = Arc::new(RenderCache::default());
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    cache
                        .get_or_render(i % RENDER_SLOTS, || vec![i as u8; 64])
                        .to_vec()
                })
            })
            .collect();
        let results: Vec<Vec<u8>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for (i, r) in results.iter().enumerate() {
            assert_eq!(
                &r[..],
                cache.get(i % RENDER_SLOTS).unwrap(),
                "every thread sees the installed value"
            );
        }
    }
}
