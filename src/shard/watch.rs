//! The per-shard registry of parked blocking queries.
//!
//! A parked query registers the [`WatchSet`] it read: exact keys, key prefixes or whole
//! tables, the store's [`Dependencies`]. When a new store version arrives,
//! [`WatchRegistry::notify`] finds the registrations its change set invalidates through the
//! store's [`DependencyIndex`] (the one rule, shared with the DNS answer cache) and wakes
//! those queries; a write to one key costs O(watchers of that key plus the number of
//! distinct prefix lengths watched in its table), never O(all watchers).
//!
//! Registrations are removed lazily: a woken or cancelled waiter frees its slot at once
//! (bumping the slot's generation), and index entries pointing at dead generations are swept
//! when they outnumber live ones, so cancellation is O(1) and the registry stays bounded.
//!
//! The registry is shard-local (`!Send`); nothing here locks.

use crate::store::{Change, Dependencies, Dependency, DependencyIndex};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::task::Waker;

/// Above this many keys a query falls back to watching its whole table: one coarse
/// registration instead of many fine ones.
pub const WATCH_TARGETS_PER_QUERY_MAX: usize = 64;

/// What a query read, and so what must wake it: the store's dependency type.
pub type WatchTarget = Dependency;

/// The set of targets of one query: the store's dependency set (keys canonical per table).
pub type WatchSet = Dependencies;

/// A registration handle; stale once the slot's generation moves on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchId {
    slot: u32,
    generation: u32,
}

struct Slot {
    generation: u32,
    live: bool,
    fired: bool,
    waker: Option<Waker>,
    /// List entries that point at this registration, for the stale-entry count.
    entries: u32,
    /// Counted in `live_waiters`: it watches something (a bare deadline does not).
    counted: bool,
}

/// How many list entries point at live registrations and how many at released ones.
/// Every entry is counted exactly once, so the sweep heuristic stays honest.
#[derive(Default, Debug)]
struct EntryCounts {
    live: usize,
    stale: usize,
}

#[derive(Default)]
pub struct WatchRegistry {
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    /// `(deadline ms, slot, generation)` of every registration with a deadline, soonest
    /// first. Entries of released registrations are skipped when they surface.
    deadlines: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// Every registration's ID, filed under each dependency of its query.
    index: DependencyIndex<WatchId>,
    counts: EntryCounts,
    live_waiters: usize,
}

impl WatchRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parked queries right now. A registration with nothing to watch (a bare deadline,
    /// such as an idle connection's) is not one.
    pub fn waiter_count(&self) -> usize {
        self.live_waiters
    }

    /// Registers a parked query. At `deadline_ms` (on the caller's millisecond clock, given
    /// again to [`WatchRegistry::expire`]) it is woken even if nothing changed; a single
    /// shard-level ticker does that for every query instead of one timer each.
    pub fn register(&mut self, set: &WatchSet, waker: Waker, deadline_ms: u64) -> WatchId {
        let targets = set.coarsened(WATCH_TARGETS_PER_QUERY_MAX);
        let slot_index = match self.free_slots.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    live: false,
                    fired: false,
                    waker: None,
                    entries: 0,
                    counted: false,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[slot_index as usize];
        debug_assert!(!slot.live);
        slot.live = true;
        slot.fired = false;
        slot.waker = Some(waker);
        slot.entries = targets.len() as u32;
        let counted = !targets.is_empty();
        slot.counted = counted;
        let id = WatchId {
            slot: slot_index,
            generation: slot.generation,
        };
        for target in &targets {
            self.index.insert(target, id);
            self.counts.live += 1;
        }
        if counted {
            self.live_waiters += 1;
        }
        if deadline_ms != u64::MAX {
            self.deadlines
                .push(Reverse((deadline_ms, id.slot, id.generation)));
        }
        id
    }

    /// Wakes every live registration whose deadline is at or before `now_ms`. Returns how
    /// many were woken.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let mut woken = 0;
        while let Some(Reverse((deadline, slot, generation))) = self.deadlines.peek().copied() {
            if deadline > now_ms {
                break;
            }
            self.deadlines.pop();
            if let Some(s) = self.slots.get_mut(slot as usize) {
                if s.live && s.generation == generation && !s.fired {
                    s.fired = true;
                    woken += 1;
                    if let Some(waker) = s.waker.take() {
                        waker.wake();
                    }
                }
            }
        }
        // Released registrations leave their deadlines behind; drop them once they
        // dominate, so the heap stays proportional to the parked queries.
        let live_registrations = self.slots.len() - self.free_slots.len();
        if self.deadlines.len() > 2 * live_registrations + 1024 {
            let slots = &self.slots;
            let live: Vec<_> = self
                .deadlines
                .drain()
                .filter(|Reverse((_, slot, generation))| {
                    slots
                        .get(*slot as usize)
                        .is_some_and(|s| s.live && s.generation == *generation)
                })
                .collect();
            self.deadlines = live.into_iter().collect();
        }
        woken
    }

    fn slot_is(&self, id: WatchId) -> Option<&Slot> {
        self.slots
            .get(id.slot as usize)
            .filter(|s| s.live && s.generation == id.generation)
    }

    /// Whether the registration was woken by a change.
    pub fn is_fired(&self, id: WatchId) -> bool {
        self.slot_is(id).is_none_or(|s| s.fired)
    }

    pub fn update_waker(&mut self, id: WatchId, waker: &Waker) {
        if let Some(slot) = self.slots.get_mut(id.slot as usize) {
            if slot.live && slot.generation == id.generation {
                match &slot.waker {
                    Some(existing) if existing.will_wake(waker) => {}
                    _ => slot.waker = Some(waker.clone()),
                }
            }
        }
    }

    /// Releases a registration, fired or not. Its list entries become stale.
    pub fn release(&mut self, id: WatchId) {
        let Some(slot) = self.slots.get_mut(id.slot as usize) else {
            return;
        };
        if !slot.live || slot.generation != id.generation {
            return;
        }
        slot.live = false;
        slot.waker = None;
        slot.generation = slot.generation.wrapping_add(1);
        let entries = slot.entries as usize;
        slot.entries = 0;
        debug_assert!(
            self.counts.live >= entries,
            "registry entry counts out of step"
        );
        self.counts.live = self.counts.live.saturating_sub(entries);
        self.counts.stale += entries;
        if slot.counted {
            self.live_waiters -= 1;
        }
        self.free_slots.push(id.slot);
        if self.counts.stale > 1024 && self.counts.stale > self.counts.live {
            self.sweep();
        }
    }

    /// Consumes one list entry that a change matched: wakes its registration if it is live
    /// and not yet fired, and keeps the entry counts exact.
    fn fire(slots: &mut [Slot], counts: &mut EntryCounts, id: WatchId, woken: &mut usize) {
        match slots.get_mut(id.slot as usize) {
            Some(slot) if slot.live && slot.generation == id.generation => {
                debug_assert!(
                    counts.live > 0 && slot.entries > 0,
                    "a live entry was counted"
                );
                counts.live = counts.live.saturating_sub(1);
                slot.entries = slot.entries.saturating_sub(1);
                if !slot.fired {
                    slot.fired = true;
                    *woken += 1;
                    if let Some(waker) = slot.waker.take() {
                        waker.wake();
                    }
                }
            }
            _ => {
                debug_assert!(counts.stale > 0, "a stale entry was counted");
                counts.stale = counts.stale.saturating_sub(1);
            }
        }
    }

    /// Wakes every query that watched something in `changes`. Returns how many were woken.
    pub fn notify(&mut self, changes: &[Change]) -> usize {
        let mut woken = 0;
        let (slots, counts) = (&mut self.slots, &mut self.counts);
        for change in changes {
            // Matched lists leave the index whole; `fire` accounts for each entry in them.
            self.index
                .take_invalidated(change, |id| Self::fire(slots, counts, id, &mut woken));
        }
        woken
    }

    /// Wakes every parked query (shutdown, leadership loss).
    pub fn notify_all(&mut self) -> usize {
        let mut woken = 0;
        for slot in self.slots.iter_mut() {
            if slot.live && !slot.fired {
                slot.fired = true;
                woken += 1;
                if let Some(waker) = slot.waker.take() {
                    waker.wake();
                }
            }
        }
        woken
    }

    /// Removes index entries whose registration is gone.
    fn sweep(&mut self) {
        let slots = &self.slots;
        let alive = |id: &WatchId| {
            slots
                .get(id.slot as usize)
                .is_some_and(|s| s.live && s.generation == id.generation)
        };
        self.counts.live = self.index.retain(alive);
        self.counts.stale = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ChangeKey, Table};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<CountingWaker>, Waker) {
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }

    fn key_change(key: &str) -> Change {
        Change::key(Table::Kvs, &Arc::from(key))
    }

    #[test]
    fn key_watch_wakes_only_for_its_key() {
        let mut registry = WatchRegistry::new();
        let (count_a, waker_a) = waker();
        let (count_b, waker_b) = waker();
        let a = registry.register(&WatchSet::new().key(Table::Kvs, "a"), waker_a, u64::MAX);
        let b = registry.register(&WatchSet::new().key(Table::Kvs, "b"), waker_b, u64::MAX);
        assert_eq!(registry.notify(&[key_change("b")]), 1);
        assert!(!registry.is_fired(a));
        assert!(registry.is_fired(b));
        assert_eq!(count_a.0.load(Ordering::SeqCst), 0);
        assert_eq!(count_b.0.load(Ordering::SeqCst), 1);
        // Another table's change with the same key is someone else's business.
        registry.notify(&[Change::key(Table::Nodes, &Arc::from("a"))]);
        assert!(!registry.is_fired(a));
    }

    #[test]
    fn prefix_watch_matches_keys_under_it() {
        let mut registry = WatchRegistry::new();
        let (_, w) = waker();
        let p = registry.register(
            &WatchSet::new().prefix(Table::Kvs, "web/"),
            w.clone(),
            u64::MAX,
        );
        let root = registry.register(&WatchSet::new().prefix(Table::Kvs, ""), w.clone(), u64::MAX);
        registry.notify(&[key_change("webby")]);
        assert!(!registry.is_fired(p));
        assert!(
            registry.is_fired(root),
            "the empty prefix matches every key"
        );
        registry.notify(&[key_change("web/a/b")]);
        assert!(registry.is_fired(p));
    }

    #[test]
    fn recursive_delete_wakes_keys_and_overlapping_prefixes() {
        let mut registry = WatchRegistry::new();
        let (_, w) = waker();
        let inside_key = registry.register(
            &WatchSet::new().key(Table::Kvs, "a/b/c"),
            w.clone(),
            u64::MAX,
        );
        let outside_key =
            registry.register(&WatchSet::new().key(Table::Kvs, "b"), w.clone(), u64::MAX);
        let deeper_prefix = registry.register(
            &WatchSet::new().prefix(Table::Kvs, "a/b/"),
            w.clone(),
            u64::MAX,
        );
        let shallower_prefix = registry.register(
            &WatchSet::new().prefix(Table::Kvs, "a"),
            w.clone(),
            u64::MAX,
        );
        registry.notify(&[Change {
            table: Table::Kvs,
            key: ChangeKey::Prefix(Arc::from("a/")),
        }]);
        assert!(registry.is_fired(inside_key));
        assert!(!registry.is_fired(outside_key));
        assert!(registry.is_fired(deeper_prefix));
        assert!(registry.is_fired(shallower_prefix));
    }

    #[test]
    fn table_watch_and_coarsening() {
        let mut registry = WatchRegistry::new();
        let (_, w) = waker();
        let mut many = WatchSet::new();
        for i in 0..(WATCH_TARGETS_PER_QUERY_MAX + 1) {
            many.add(WatchTarget::Key(
                Table::Services,
                Arc::from(format!("s{i}")),
            ));
        }
        let coarse = registry.register(&many, w.clone(), u64::MAX);
        registry.notify(&[Change::key(Table::Services, &Arc::from("unrelated"))]);
        assert!(registry.is_fired(coarse), "coarsened to the whole table");
    }

    #[test]
    fn released_waiters_are_never_woken_and_slots_are_reused() {
        let mut registry = WatchRegistry::new();
        let (count, w) = waker();
        let first = registry.register(&WatchSet::new().key(Table::Kvs, "k"), w.clone(), u64::MAX);
        registry.release(first);
        assert_eq!(registry.waiter_count(), 0);
        let second = registry.register(
            &WatchSet::new().key(Table::Kvs, "other"),
            w.clone(),
            u64::MAX,
        );
        assert_eq!(second.slot, first.slot);
        assert_ne!(second.generation, first.generation);
        registry.notify(&[key_change("k")]);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "the stale entry for k must not wake the reused slot"
        );
        assert!(!registry.is_fired(second));
    }

    #[test]
    fn sweeping_keeps_live_registrations() {
        let mut registry = WatchRegistry::new();
        let (_, w) = waker();
        let keeper = registry.register(
            &WatchSet::new().key(Table::Kvs, "keep"),
            w.clone(),
            u64::MAX,
        );
        for i in 0..5000 {
            let id = registry.register(
                &WatchSet::new().key(Table::Kvs, format!("tmp{}", i % 7)),
                w.clone(),
                u64::MAX,
            );
            registry.release(id);
        }
        assert!(registry.counts.stale <= registry.counts.live.max(1024));
        registry.notify(&[key_change("keep")]);
        assert!(registry.is_fired(keeper));
    }

    #[test]
    fn fired_then_released_waiters_keep_counts_exact_through_sweeps() {
        // Regression: fired lists were dropped without adjusting the counts, so a sweep
        // followed by more releases underflowed the live count.
        let mut registry = WatchRegistry::new();
        let (_, w) = waker();
        for round in 0..3 {
            let ids: Vec<WatchId> = (0..3000)
                .map(|i| {
                    registry.register(
                        &WatchSet::new()
                            .key(Table::Kvs, "k")
                            .key(Table::Kvs, format!("own{}", i % 5)),
                        w.clone(),
                        u64::MAX,
                    )
                })
                .collect();
            assert_eq!(registry.notify(&[key_change("k")]), 3000, "round {round}");
            for id in ids {
                registry.release(id);
            }
            assert_eq!(registry.waiter_count(), 0);
            assert_eq!(
                registry.counts.live, 0,
                "round {round}: {:?}",
                registry.counts
            );
        }
        // The registry still works afterwards.
        let id = registry.register(
            &WatchSet::new().key(Table::Kvs, "own1"),
            w.clone(),
            u64::MAX,
        );
        registry.notify(&[key_change("own1")]);
        assert!(registry.is_fired(id));
    }

    #[test]
    fn deadlines_wake_without_changes_and_skip_released() {
        let mut registry = WatchRegistry::new();
        let (count, w) = waker();
        let early = registry.register(&WatchSet::new().key(Table::Kvs, "a"), w.clone(), 100);
        let late = registry.register(&WatchSet::new().key(Table::Kvs, "a"), w.clone(), 300);
        let released = registry.register(&WatchSet::new().key(Table::Kvs, "b"), w.clone(), 50);
        registry.release(released);
        assert_eq!(registry.expire(99), 0);
        assert_eq!(registry.expire(100), 1);
        assert!(registry.is_fired(early));
        assert!(!registry.is_fired(late));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(registry.expire(1_000), 1);
        assert!(registry.is_fired(late));
        // A change after expiry does not wake them twice.
        registry.notify(&[key_change("a")]);
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn bare_deadlines_are_not_parked_queries() {
        let mut registry = WatchRegistry::new();
        let (count, w) = waker();
        let idle = registry.register(&WatchSet::new(), w.clone(), 100);
        assert_eq!(registry.waiter_count(), 0);
        registry.notify(&[key_change("a")]);
        assert!(
            !registry.is_fired(idle),
            "changes never wake a bare deadline"
        );
        assert_eq!(registry.expire(100), 1);
        assert!(registry.is_fired(idle));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        registry.release(idle);
        let parked = registry.register(&WatchSet::new().key(Table::Kvs, "a"), w, 100);
        assert_eq!(registry.waiter_count(), 1);
        registry.release(parked);
        assert_eq!(registry.waiter_count(), 0);
    }

    #[test]
    fn fan_out_wakes_exactly_the_watchers_of_one_key() {
        let mut registry = WatchRegistry::new();
        let (count, w) = waker();
        let web: Vec<WatchId> = (0..15_000)
            .map(|_| {
                registry.register(&WatchSet::new().key(Table::Kvs, "web"), w.clone(), u64::MAX)
            })
            .collect();
        let api: Vec<WatchId> = (0..5_000)
            .map(|_| {
                registry.register(&WatchSet::new().key(Table::Kvs, "api"), w.clone(), u64::MAX)
            })
            .collect();
        assert_eq!(registry.notify(&[key_change("web")]), 15_000);
        assert_eq!(count.0.load(Ordering::SeqCst), 15_000);
        assert!(web.iter().all(|id| registry.is_fired(*id)));
        assert!(api.iter().all(|id| !registry.is_fired(*id)));
    }
}
