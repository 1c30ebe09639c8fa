//! A fill-once cache of byte renderings attached to an immutable row, shared by every
//! thread that reads the row's store version.
//!
//! Rows never change after they are built (a write builds new ones), so a rendering made
//! from a row stays correct for as long as the row exists. The API layer renders a row's
//! JSON once and copies it into every later answer. Filling is lock-free: each slot is an
//! atomic pointer installed with compare-and-swap; two threads that render the same slot
//! at once both succeed and one copy is dropped. Nobody ever waits.
//!
//! The store only keeps the bytes; what each slot means is the API layer's business.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

/// Slots per cache.
pub const RENDER_SLOTS: usize = 4;

type Slot = AtomicPtr<Arc<[u8]>>;

struct Block {
    slots: [Slot; RENDER_SLOTS],
}

impl Block {
    fn empty() -> Block {
        Block {
            slots: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }
}

/// Empty until first used: one null pointer per row.
pub struct RenderCache {
    block: AtomicPtr<Block>,
}

impl Default for RenderCache {
    fn default() -> Self {
        RenderCache {
            block: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

impl RenderCache {
    fn block(&self) -> &Block {
        let current = self.block.load(Ordering::Acquire);
        if !current.is_null() {
            // SAFETY: a published block lives until the cache is dropped, which needs
            // exclusive access; `&self` outlives the returned reference.
            return unsafe { &*current };
        }
        let fresh = Box::into_raw(Box::new(Block::empty()));
        match self.block.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: we just published `fresh`; see above for its lifetime.
            Ok(_) => unsafe { &*fresh },
            Err(existing) => {
                // SAFETY: `fresh` was never published; we still own it.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: as above, for the block another thread published.
                unsafe { &*existing }
            }
        }
    }

    /// The rendering in `slot`, made by `render` if this is the first request for it.
    pub fn get_or_render(&self, slot: usize, render: impl FnOnce() -> Vec<u8>) -> Arc<[u8]> {
        let cell = &self.block().slots[slot];
        let current = cell.load(Ordering::Acquire);
        if !current.is_null() {
            // SAFETY: published slot contents live until the cache is dropped.
            return unsafe { (*current).clone() };
        }
        let rendered: Arc<[u8]> = render().into();
        let fresh = Box::into_raw(Box::new(rendered.clone()));
        match cell.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => rendered,
            Err(existing) => {
                // SAFETY: `fresh` was never published.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: published by another thread; lives until drop.
                unsafe { (*existing).clone() }
            }
        }
    }

    /// The rendering in `slot` if there is one.
    pub fn get(&self, slot: usize) -> Option<Arc<[u8]>> {
        let block = self.block.load(Ordering::Acquire);
        if block.is_null() {
            return None;
        }
        // SAFETY: see `block`.
        let current = unsafe { &*block }.slots[slot].load(Ordering::Acquire);
        // SAFETY: see `get_or_render`.
        (!current.is_null()).then(|| unsafe { (*current).clone() })
    }
}

impl Clone for RenderCache {
    /// A copy of a row keeps its renderings: they describe the same content.
    fn clone(&self) -> Self {
        if self.block.load(Ordering::Acquire).is_null() {
            return RenderCache::default();
        }
        let block = Block::empty();
        for (slot, cell) in block.slots.iter().enumerate() {
            if let Some(bytes) = self.get(slot) {
                cell.store(Box::into_raw(Box::new(bytes)), Ordering::Relaxed);
            }
        }
        RenderCache {
            block: AtomicPtr::new(Box::into_raw(Box::new(block))),
        }
    }
}

impl Drop for RenderCache {
    fn drop(&mut self) {
        let block = *self.block.get_mut();
        if block.is_null() {
            return;
        }
        // SAFETY: `&mut self` means no other reference to the block or its slots exists.
        let mut block = unsafe { Box::from_raw(block) };
        for slot in block.slots.iter_mut() {
            let contents = *slot.get_mut();
            if !contents.is_null() {
                // SAFETY: as above.
                drop(unsafe { Box::from_raw(contents) });
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
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn fills_once_and_survives_clones() {
        let cache = RenderCache::default();
        assert!(cache.get(1).is_none());
        let renders = AtomicUsize::new(0);
        let render = || {
            renders.fetch_add(1, Ordering::SeqCst);
            b"{\"a\":1}".to_vec()
        };
        assert_eq!(&*cache.get_or_render(1, render), b"{\"a\":1}");
        assert_eq!(&*cache.get_or_render(1, render), b"{\"a\":1}");
        assert_eq!(renders.load(Ordering::SeqCst), 1);
        let copy = cache.clone();
        assert_eq!(copy.get(1).as_deref(), Some(&b"{\"a\":1}"[..]));
        assert!(copy.get(0).is_none());
        drop(cache);
        assert_eq!(copy.get(1).as_deref(), Some(&b"{\"a\":1}"[..]));
    }

    #[test]
    fn concurrent_fills_agree() {
        let cache = Arc::new(RenderCache::default());
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    cache.get_or_render(i % RENDER_SLOTS, || vec![i as u8; 64])
                })
            })
            .collect();
        let results: Vec<Arc<[u8]>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for (i, r) in results.iter().enumerate() {
            assert_eq!(
                &**r,
                &*cache.get(i % RENDER_SLOTS).unwrap(),
                "every thread sees the installed value"
            );
        }
    }
}
