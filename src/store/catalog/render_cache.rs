//! A fill-once cache of byte renderings attached to an immutable row, shared by every
//! thread that reads the row's store version.
//!
//! Rows never change after they are built (a write builds new ones), so a rendering made
//! from a row stays correct for as long as the row exists. The API layer renders a row's
//! JSON once and copies it into every later answer. Filling is lock-free: each slot is an
//! atomic pointer installed with compare-and-swap; two threads that render the same slot
//! at once both succeed and one copy is dropped. Nobody ever waits.
//!
//! Layout is chosen for the read path, which walks thousands of rows per answer: the slots
//! live inline in the row, and each points straight at a [`Blob`] — a reference count, a
//! length and the bytes in one allocation — so reaching a rendering is one pointer hop.
//! Copies of a row (persistent maps copy rows along changed paths) share blobs by count.
//!
//! The store only keeps the bytes; what each slot means is the API layer's business.

use std::alloc::{alloc, dealloc, Layout};
use std::sync::atomic::{fence, AtomicPtr, AtomicUsize, Ordering};

/// Slots per cache.
pub const RENDER_SLOTS: usize = 4;

/// Header of a blob allocation; the bytes follow it.
#[repr(C)]
struct BlobHeader {
    count: AtomicUsize,
    len: usize,
}

const HEADER: usize = std::mem::size_of::<BlobHeader>();

fn layout(len: usize) -> Layout {
    Layout::from_size_align(HEADER + len, std::mem::align_of::<BlobHeader>())
        .expect("rendering sizes are far below isize::MAX")
}

/// Allocates a blob holding `bytes` with a count of one.
fn blob_new(bytes: &[u8]) -> *mut BlobHeader {
    let layout = layout(bytes.len());
    // SAFETY: the layout is non-zero-sized (it includes the header); the header is written
    // before use and the bytes are copied into the space that follows it.
    unsafe {
        let ptr = alloc(layout) as *mut BlobHeader;
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        ptr.write(BlobHeader {
            count: AtomicUsize::new(1),
            len: bytes.len(),
        });
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (ptr as *mut u8).add(HEADER), bytes.len());
        ptr
    }
}

/// The bytes of a live blob.
///
/// # Safety
/// `ptr` must point to a blob whose count stays above zero for `'a`.
unsafe fn blob_bytes<'a>(ptr: *const BlobHeader) -> &'a [u8] {
    // SAFETY: guaranteed by the caller; the bytes follow the header.
    unsafe { std::slice::from_raw_parts((ptr as *const u8).add(HEADER), (*ptr).len) }
}

/// Drops one reference, freeing the blob with the last.
///
/// # Safety
/// `ptr` must be a live blob and the caller must own one of its references.
unsafe fn blob_release(ptr: *mut BlobHeader) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        if (*ptr).count.fetch_sub(1, Ordering::Release) == 1 {
            fence(Ordering::Acquire);
            let len = (*ptr).len;
            dealloc(ptr as *mut u8, layout(len));
        }
    }
}

/// Per-row renderings; empty slots cost a null pointer each.
pub struct RenderCache {
    slots: [AtomicPtr<BlobHeader>; RENDER_SLOTS],
}

impl Default for RenderCache {
    fn default() -> Self {
        RenderCache {
            slots: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }
}

impl RenderCache {
    /// The rendering in `slot`, made by `render` if this is the first request for it. The
    /// bytes live as long as the cache.
    pub fn get_or_render(&self, slot: usize, render: impl FnOnce() -> Vec<u8>) -> &[u8] {
        let cell = &self.slots[slot];
        let current = cell.load(Ordering::Acquire);
        if !current.is_null() {
            // SAFETY: a published blob keeps the cache's reference until the cache drops,
            // which needs `&mut self`; `&self` outlives the slice.
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
                // SAFETY: `fresh` was never published; its only reference is ours.
                unsafe { blob_release(fresh) };
                // SAFETY: published by another thread, as above.
                unsafe { blob_bytes(existing) }
            }
        }
    }

    /// The rendering in `slot` if there is one.
    pub fn get(&self, slot: usize) -> Option<&[u8]> {
        let current = self.slots[slot].load(Ordering::Acquire);
        // SAFETY: see `get_or_render`.
        (!current.is_null()).then(|| unsafe { blob_bytes(current) })
    }
}

impl Clone for RenderCache {
    /// A copy of a row shares its renderings: they describe the same content.
    fn clone(&self) -> Self {
        let copy = RenderCache::default();
        for (from, to) in self.slots.iter().zip(copy.slots.iter()) {
            let blob = from.load(Ordering::Acquire);
            if !blob.is_null() {
                // SAFETY: the blob is live (`self` holds a reference); we take another.
                unsafe { (*blob).count.fetch_add(1, Ordering::Relaxed) };
                to.store(blob, Ordering::Relaxed);
            }
        }
        copy
    }
}

impl Drop for RenderCache {
    fn drop(&mut self) {
        for slot in self.slots.iter_mut() {
            let blob = *slot.get_mut();
            if !blob.is_null() {
                // SAFETY: the slot owns one reference to a live blob.
                unsafe { blob_release(blob) };
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
