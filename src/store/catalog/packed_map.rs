//! [`PackedMap`]: the persistent (copy-on-write) ordered map behind the catalog's
//! per-instance indexes, laid out so that an entry costs its own bytes and little more.
//!
//! Why not `imbl::OrdMap`: its nodes are fixed arrays of 16 slots, allocated whole, and a
//! full node splits in the middle, so keys inserted in order (fleets register in name
//! order, and a node's instances one after another) leave every node half empty — at the
//! catalog's entry sizes about 100 bytes of slack per registered instance. Here a branch is
//! allocated to exactly its children and a leaf to exactly its entries (see
//! [`leaf_capacity`]), and an append to a full leaf starts a new one rather than halving
//! it, so in-order inserts leave full leaves: the overhead is about one node header per
//! [`LEAF_ENTRIES_MAX`] entries. A write copies what an
//! `imbl` write copies: the one leaf it changes and the branches above it, when another
//! version shares them; a leaf holds at most [`LEAF_ENTRIES_MAX`] entries, the same bound.
//!
//! Structure: a B+tree. Leaves hold the entries in key order; a branch holds its children
//! and, between each pair, the separator — the smallest key of the child on its right.
//! Every leaf is at the same depth.
//!
//! Invariants (checked by `check` in tests): keys are strictly increasing across the leaves
//! in order; every key of child `i + 1` of a branch is at or above separator `i` and every
//! key of child `i` below it; no node is empty except an empty root leaf (never stored: the
//! empty map has no root); a branch has at most [`BRANCH_CHILDREN_MAX`] children, and at
//! least two at the root and one elsewhere; `len` is the number of entries.

use equivalent::Comparable;
use std::cmp::Ordering;
use std::fmt;
use triomphe::Arc;

/// Entries of a leaf before it splits; a copy-on-write of a leaf clones at most this many.
pub const LEAF_ENTRIES_MAX: usize = 16;
/// Children of a branch before it splits.
pub const BRANCH_CHILDREN_MAX: usize = 16;
/// A node with fewer entries (or children) than this after a removal is merged into a
/// neighbour when the two fit in one node.
const MERGE_BELOW: usize = 4;

/// A persistent ordered map; clones share every node until one of them writes.
pub struct PackedMap<K, V> {
    root: Option<Arc<Node<K, V>>>,
    len: usize,
}

enum Node<K, V> {
    /// Entries in key order; the allocation holds [`leaf_capacity`] of their number.
    Leaf(Vec<(K, V)>),
    Branch(Branch<K, V>),
}

struct Branch<K, V> {
    /// `separators[i]` is the smallest key under `children[i + 1]`.
    separators: Box<[K]>,
    children: Box<[Arc<Node<K, V>>]>,
}

impl<K: Clone, V: Clone> Clone for Node<K, V> {
    fn clone(&self) -> Self {
        match self {
            Node::Leaf(entries) => {
                let mut copy = Vec::with_capacity(leaf_capacity(entries.len()));
                copy.extend(entries.iter().cloned());
                Node::Leaf(copy)
            }
            Node::Branch(branch) => Node::Branch(Branch {
                separators: branch.separators.clone(),
                children: branch.children.clone(),
            }),
        }
    }
}

/// The room a leaf of `len` entries is allocated with: exactly its entries. Measured at
/// 100,000 instances registered by 64 concurrent clients (docs/memory.md): leaves rounded up
/// to a power of two left 597–608 B of RSS per instance, exact leaves 576–577 B — inserts
/// arrive out of order, so many leaves sit between sizes. A write then reallocates the leaf
/// it copies anyway (copy-on-write), at about 4% more instructions per register apply.
fn leaf_capacity(len: usize) -> usize {
    len.min(LEAF_ENTRIES_MAX)
}

/// Sets a leaf's allocation to [`leaf_capacity`] of its length.
fn fit<T>(entries: &mut Vec<T>) {
    let capacity = leaf_capacity(entries.len());
    if entries.capacity() > capacity {
        entries.shrink_to(capacity);
    } else if entries.capacity() < capacity {
        entries.reserve_exact(capacity - entries.len());
    }
}

/// Inserts `item` at `at` into a leaf, growing its allocation to the next size if full.
fn leaf_insert<T>(entries: &mut Vec<T>, at: usize, item: T) {
    if entries.len() == entries.capacity() {
        entries.reserve_exact(leaf_capacity(entries.len() + 1) - entries.len());
    }
    entries.insert(at, item);
}

/// Inserts `item` at `at` into a boxed slice, growing its allocation by exactly one.
fn boxed_insert<T>(items: &mut Box<[T]>, at: usize, item: T) {
    let mut list = std::mem::take(items).into_vec();
    list.reserve_exact(1);
    list.insert(at, item);
    *items = list.into_boxed_slice();
}

/// Removes the item at `at` from a boxed slice, shrinking its allocation to fit.
fn boxed_remove<T>(items: &mut Box<[T]>, at: usize) -> T {
    let mut list = std::mem::take(items).into_vec();
    let item = list.remove(at);
    *items = list.into_boxed_slice();
    item
}

/// Splits a boxed slice at `at`: `items` keeps the front, the tail is returned.
fn boxed_split_off<T>(items: &mut Box<[T]>, at: usize) -> Box<[T]> {
    let mut list = std::mem::take(items).into_vec();
    let tail = list.split_off(at).into_boxed_slice();
    *items = list.into_boxed_slice();
    tail
}

/// Appends `tail` to a boxed slice.
fn boxed_append<T>(items: &mut Box<[T]>, tail: Box<[T]>) {
    let mut list = std::mem::take(items).into_vec();
    list.reserve_exact(tail.len());
    list.extend(tail.into_vec());
    *items = list.into_boxed_slice();
}

impl<K, V> Node<K, V> {
    /// Entries of a leaf, children of a branch.
    fn width(&self) -> usize {
        match self {
            Node::Leaf(entries) => entries.len(),
            Node::Branch(branch) => branch.children.len(),
        }
    }
}

impl<K, V> Branch<K, V> {
    /// The child whose range holds `key`: the number of separators at or below it.
    #[inline]
    fn child_for<Q: Comparable<K> + ?Sized>(&self, key: &Q) -> usize {
        let (mut low, mut high) = (0, self.separators.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if key.compare(&self.separators[mid]) == Ordering::Less {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low
    }
}

/// Branch levels a path may cross: 16 levels of at least two children (the root) or a
/// half-full branch hold far more entries than memory does.
const DEPTH_MAX: usize = 16;

/// The way down to one entry.
struct Path {
    /// The child taken at each branch, from the root.
    children: [u8; DEPTH_MAX],
    depth: usize,
    /// The entry's position in its leaf.
    entry: usize,
}

impl Path {
    fn branches(&self) -> &[u8] {
        &self.children[..self.depth]
    }
}

/// What an insert into a subtree did.
struct Inserted<K, V> {
    /// The value the key had.
    replaced: Option<V>,
    /// A new right sibling split off the subtree, with its smallest key.
    split: Option<(K, Arc<Node<K, V>>)>,
}

impl<K: Ord + Clone, V: Clone> Node<K, V> {
    fn insert(&mut self, key: K, value: V) -> Inserted<K, V> {
        match self {
            Node::Leaf(entries) => {
                let at = match entries.binary_search_by(|(k, _)| k.cmp(&key)) {
                    Ok(at) => {
                        let replaced = std::mem::replace(&mut entries[at].1, value);
                        return Inserted {
                            replaced: Some(replaced),
                            split: None,
                        };
                    }
                    Err(at) => at,
                };
                let split = if entries.len() < LEAF_ENTRIES_MAX {
                    leaf_insert(entries, at, (key, value));
                    None
                } else if at == entries.len() {
                    // Appending: keys arrive in order, so leave this leaf full and start
                    // the next one, rather than leaving two half-full leaves behind.
                    let separator = key.clone();
                    let right = Node::Leaf(vec![(key, value)]);
                    Some((separator, Arc::new(right)))
                } else {
                    let mut right = entries.split_off(entries.len() / 2);
                    if at <= entries.len() {
                        entries.insert(at, (key, value));
                    } else {
                        let at = at - entries.len();
                        right.insert(at, (key, value));
                    }
                    fit(entries);
                    fit(&mut right);
                    let separator = right[0].0.clone();
                    Some((separator, Arc::new(Node::Leaf(right))))
                };
                Inserted {
                    replaced: None,
                    split,
                }
            }
            Node::Branch(branch) => {
                let at = branch.child_for(&key);
                let inserted = insert_into(&mut branch.children[at], key, value);
                let Some((separator, child)) = inserted.split else {
                    return inserted;
                };
                boxed_insert(&mut branch.separators, at, separator);
                boxed_insert(&mut branch.children, at + 1, child);
                if branch.children.len() <= BRANCH_CHILDREN_MAX {
                    return Inserted {
                        replaced: inserted.replaced,
                        split: None,
                    };
                }
                // Appending leaves the branch nearly full behind (the new one takes the last
                // two children), as appending leaves do.
                let keep = if at + 1 == BRANCH_CHILDREN_MAX {
                    BRANCH_CHILDREN_MAX - 1
                } else {
                    branch.children.len() / 2
                };
                let right_children = boxed_split_off(&mut branch.children, keep);
                let mut right_separators = boxed_split_off(&mut branch.separators, keep - 1);
                let up = boxed_remove(&mut right_separators, 0);
                let right = Node::Branch(Branch {
                    separators: right_separators,
                    children: right_children,
                });
                Inserted {
                    replaced: inserted.replaced,
                    split: Some((up, Arc::new(right))),
                }
            }
        }
    }

    /// Removes the entry at the end of `path` (the part below this node).
    fn remove_at(&mut self, branches: &[u8], entry: usize) -> (K, V) {
        match self {
            Node::Leaf(entries) => {
                debug_assert!(branches.is_empty(), "a path ends in a leaf");
                let removed = entries.remove(entry);
                fit(entries);
                removed
            }
            Node::Branch(branch) => {
                let at = branches[0] as usize;
                let removed = remove_from(&mut branch.children[at], &branches[1..], entry);
                let width = branch.children[at].width();
                if width == 0 {
                    boxed_remove(&mut branch.children, at);
                    boxed_remove(&mut branch.separators, at.saturating_sub(1));
                } else if width < MERGE_BELOW {
                    branch.merge_small(at);
                }
                removed
            }
        }
    }
}

/// Inserts into the subtree `node`, copying it first if another version shares it. A shared
/// leaf that takes the entry without splitting is copied with the entry in place, in one
/// allocation of its new size, instead of copied and then grown.
fn insert_into<K: Ord + Clone, V: Clone>(
    node: &mut Arc<Node<K, V>>,
    key: K,
    value: V,
) -> Inserted<K, V> {
    if !node.is_unique() {
        if let Node::Leaf(entries) = &**node {
            if entries.len() < LEAF_ENTRIES_MAX {
                if let Err(at) = entries.binary_search_by(|(k, _)| k.cmp(&key)) {
                    let mut copy = Vec::with_capacity(leaf_capacity(entries.len() + 1));
                    copy.extend(entries[..at].iter().cloned());
                    copy.push((key, value));
                    copy.extend(entries[at..].iter().cloned());
                    *node = Arc::new(Node::Leaf(copy));
                    return Inserted {
                        replaced: None,
                        split: None,
                    };
                }
            }
        }
    }
    Arc::make_mut(node).insert(key, value)
}

/// Removes the entry at the end of `branches` from the subtree `node`, copying it first if
/// another version shares it. A shared leaf is copied without the entry, in one allocation
/// of its new size, instead of copied and then shrunk.
fn remove_from<K: Ord + Clone, V: Clone>(
    node: &mut Arc<Node<K, V>>,
    branches: &[u8],
    entry: usize,
) -> (K, V) {
    if !node.is_unique() {
        if let Node::Leaf(entries) = &**node {
            debug_assert!(branches.is_empty(), "a path ends in a leaf");
            let removed = entries[entry].clone();
            let mut copy = Vec::with_capacity(leaf_capacity(entries.len() - 1));
            copy.extend(entries[..entry].iter().cloned());
            copy.extend(entries[entry + 1..].iter().cloned());
            *node = Arc::new(Node::Leaf(copy));
            return removed;
        }
    }
    Arc::make_mut(node).remove_at(branches, entry)
}

impl<K: Clone, V: Clone> Branch<K, V> {
    /// Merges small child `at` into a neighbour, when the two fit in one node.
    fn merge_small(&mut self, at: usize) {
        let fits = |left: usize, right: usize| {
            let (a, b) = (&self.children[left], &self.children[right]);
            let max = match **a {
                Node::Leaf(_) => LEAF_ENTRIES_MAX,
                Node::Branch(_) => BRANCH_CHILDREN_MAX,
            };
            a.width() + b.width() <= max
        };
        let left = if at > 0 && fits(at - 1, at) {
            at - 1
        } else if at + 1 < self.children.len() && fits(at, at + 1) {
            at
        } else {
            return;
        };
        let separator = boxed_remove(&mut self.separators, left);
        let right = boxed_remove(&mut self.children, left + 1);
        let right = Arc::try_unwrap(right).unwrap_or_else(|shared| (*shared).clone());
        match (Arc::make_mut(&mut self.children[left]), right) {
            (Node::Leaf(entries), Node::Leaf(mut tail)) => {
                entries.append(&mut tail);
                fit(entries);
            }
            (Node::Branch(branch), Node::Branch(tail)) => {
                let end = branch.separators.len();
                boxed_insert(&mut branch.separators, end, separator);
                boxed_append(&mut branch.separators, tail.separators);
                boxed_append(&mut branch.children, tail.children);
            }
            _ => unreachable!("siblings are at the same depth"),
        }
    }
}

impl<K, V> PackedMap<K, V> {
    pub const fn new() -> Self {
        PackedMap { root: None, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether both share their root, so hold the same entries (a cheap "untouched" test).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        match (&self.root, &other.root) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// Where `key` is: the child taken at each branch and the entry in the leaf.
    fn path_to<Q: Comparable<K> + ?Sized>(&self, key: &Q) -> Option<Path> {
        let mut path = Path {
            children: [0; DEPTH_MAX],
            depth: 0,
            entry: 0,
        };
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Leaf(entries) => {
                    path.entry = entries
                        .binary_search_by(|(k, _)| key.compare(k).reverse())
                        .ok()?;
                    return Some(path);
                }
                Node::Branch(branch) => {
                    let child = branch.child_for(key);
                    assert!(path.depth < DEPTH_MAX, "a tree of {} entries", self.len);
                    path.children[path.depth] = child as u8;
                    path.depth += 1;
                    node = &branch.children[child];
                }
            }
        }
    }

    /// The leaf entry holding `key`.
    fn find<Q: Comparable<K> + ?Sized>(&self, key: &Q) -> Option<&(K, V)> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Leaf(entries) => {
                    let at = entries
                        .binary_search_by(|(k, _)| key.compare(k).reverse())
                        .ok()?;
                    return Some(&entries[at]);
                }
                Node::Branch(branch) => node = &branch.children[branch.child_for(key)],
            }
        }
    }

    pub fn get<Q: Comparable<K> + ?Sized>(&self, key: &Q) -> Option<&V> {
        self.find(key).map(|(_, v)| v)
    }

    pub fn get_key_value<Q: Comparable<K> + ?Sized>(&self, key: &Q) -> Option<(&K, &V)> {
        self.find(key).map(|(k, v)| (k, v))
    }

    pub fn contains_key<Q: Comparable<K> + ?Sized>(&self, key: &Q) -> bool {
        self.find(key).is_some()
    }

    /// The value of the smallest key; unlike `values().next()`, allocates no iterator stack.
    pub fn first_value(&self) -> Option<&V> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Leaf(entries) => return entries.first().map(|(_, v)| v),
                Node::Branch(branch) => node = &branch.children[0],
            }
        }
    }

    /// Entries in key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        let mut iter = Iter {
            branches: Vec::new(),
            leaf: [].iter(),
            remaining: self.len,
        };
        if let Some(root) = &self.root {
            iter.descend(root);
        }
        iter
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

impl<K: Ord + Clone, V: Clone> PackedMap<K, V> {
    /// The value of `key`, for writing: the path to it is copied when shared.
    pub fn get_mut<Q: Comparable<K> + ?Sized>(&mut self, key: &Q) -> Option<&mut V> {
        // Find the key first, so that a miss copies nothing and the copy compares no keys.
        let path = self.path_to(key)?;
        let mut node = Arc::make_mut(self.root.as_mut()?);
        for &child in path.branches() {
            let Node::Branch(branch) = node else {
                unreachable!("the path was taken through branches")
            };
            node = Arc::make_mut(&mut branch.children[child as usize]);
        }
        let Node::Leaf(entries) = node else {
            unreachable!("a path ends in a leaf")
        };
        Some(&mut entries[path.entry].1)
    }

    /// Sets `key` to `value`; returns the value it had.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let Some(root) = &mut self.root else {
            self.root = Some(Arc::new(Node::Leaf(vec![(key, value)])));
            self.len = 1;
            return None;
        };
        let inserted = insert_into(root, key, value);
        if let Some((separator, right)) = inserted.split {
            let left = self.root.take().expect("root present");
            self.root = Some(Arc::new(Node::Branch(Branch {
                separators: Box::new([separator]),
                children: Box::new([left, right]),
            })));
        }
        if inserted.replaced.is_none() {
            self.len += 1;
        }
        inserted.replaced
    }

    /// Removes `key`; returns its entry.
    pub fn remove_with_key<Q: Comparable<K> + ?Sized>(&mut self, key: &Q) -> Option<(K, V)> {
        // Find the key first, so that a miss copies nothing and the copy compares no keys.
        let path = self.path_to(key)?;
        let root = self.root.as_mut().expect("found in it");
        let removed = remove_from(root, path.branches(), path.entry);
        self.len -= 1;
        // A root branch left with one child hands the root to it.
        while let Some(Node::Branch(branch)) = self.root.as_deref() {
            if branch.children.len() > 1 {
                break;
            }
            self.root = Some(branch.children[0].clone());
        }
        if self.len == 0 {
            self.root = None;
        }
        Some(removed)
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q: Comparable<K> + ?Sized>(&mut self, key: &Q) -> Option<V> {
        self.remove_with_key(key).map(|(_, v)| v)
    }

    /// Every value, for writing; the nodes holding them are copied when shared.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.iter_mut().map(|(_, value)| value)
    }

    /// Entries in key order, values for writing (see [`PackedMap::values_mut`]).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        fn collect<'a, K: Clone, V: Clone>(
            node: &'a mut Arc<Node<K, V>>,
            out: &mut Vec<(&'a K, &'a mut V)>,
        ) {
            match Arc::make_mut(node) {
                Node::Leaf(entries) => out.extend(entries.iter_mut().map(|(k, v)| (&*k, v))),
                Node::Branch(branch) => {
                    for child in branch.children.iter_mut() {
                        collect(child, out);
                    }
                }
            }
        }
        let mut entries = Vec::with_capacity(self.len);
        if let Some(root) = &mut self.root {
            collect(root, &mut entries);
        }
        entries.into_iter()
    }
}

/// In-order iterator over a [`PackedMap`].
pub struct Iter<'a, K, V> {
    /// The branches above the current leaf, each with its children not yet visited.
    branches: Vec<std::slice::Iter<'a, Arc<Node<K, V>>>>,
    leaf: std::slice::Iter<'a, (K, V)>,
    remaining: usize,
}

impl<'a, K, V> Iter<'a, K, V> {
    /// Goes down the leftmost path of `node`.
    fn descend(&mut self, mut node: &'a Node<K, V>) {
        loop {
            match node {
                Node::Leaf(entries) => {
                    self.leaf = entries.iter();
                    return;
                }
                Node::Branch(branch) => {
                    let mut children = branch.children.iter();
                    node = children.next().expect("a branch has children");
                    self.branches.push(children);
                }
            }
        }
    }
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((k, v)) = self.leaf.next() {
                self.remaining -= 1;
                return Some((k, v));
            }
            // The leaf is done: the next child of the nearest branch that has one.
            let next = loop {
                let children = self.branches.last_mut()?;
                match children.next() {
                    Some(child) => break child,
                    None => {
                        self.branches.pop();
                    }
                }
            };
            self.descend(next);
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}

impl<'a, K, V> IntoIterator for &'a PackedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K, V> Clone for PackedMap<K, V> {
    fn clone(&self) -> Self {
        PackedMap {
            root: self.root.clone(),
            len: self.len,
        }
    }
}

impl<K, V> Default for PackedMap<K, V> {
    fn default() -> Self {
        PackedMap::new()
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for PackedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: PartialEq, V: PartialEq> PartialEq for PackedMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<K: Eq, V: Eq> Eq for PackedMap<K, V> {}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for PackedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut map = PackedMap::new();
        for (k, v) in entries {
            map.insert(k, v);
        }
        map
    }
}

impl<K: Ord + fmt::Debug, V> PackedMap<K, V> {
    /// Panics unless the invariants in the module documentation hold. For tests.
    pub fn check(&self) {
        fn walk<'a, K: Ord + fmt::Debug, V>(
            node: &'a Node<K, V>,
            low: Option<&'a K>,
            high: Option<&'a K>,
            depth: usize,
            leaf_depth: &mut Option<usize>,
        ) -> usize {
            match node {
                Node::Leaf(entries) => {
                    assert!(!entries.is_empty() && entries.len() <= LEAF_ENTRIES_MAX);
                    if std::mem::size_of::<(K, V)>() > 0 {
                        assert_eq!(entries.capacity(), leaf_capacity(entries.len()));
                    }
                    assert!(entries.windows(2).all(|w| w[0].0 < w[1].0), "keys in order");
                    let (first, last) = (&entries[0].0, &entries[entries.len() - 1].0);
                    assert!(
                        low.is_none_or(|low| low <= first),
                        "{first:?} below its range"
                    );
                    assert!(
                        high.is_none_or(|high| last < high),
                        "{last:?} above its range"
                    );
                    assert_eq!(*leaf_depth.get_or_insert(depth), depth, "leaves level");
                    entries.len()
                }
                Node::Branch(branch) => {
                    let children = branch.children.len();
                    // A branch whose neighbours were too full to take its last child in
                    // keeps just that one; the root never does.
                    let least = if depth == 0 { 2 } else { 1 };
                    assert!((least..=BRANCH_CHILDREN_MAX).contains(&children));
                    assert_eq!(branch.separators.len() + 1, children);
                    assert!(branch.separators.windows(2).all(|w| w[0] < w[1]));
                    (0..children)
                        .map(|i| {
                            let low = if i == 0 {
                                low
                            } else {
                                Some(&branch.separators[i - 1])
                            };
                            let high = branch.separators.get(i).or(high);
                            walk(&branch.children[i], low, high, depth + 1, leaf_depth)
                        })
                        .sum()
                }
            }
        }
        let counted = self
            .root
            .as_deref()
            .map_or(0, |root| walk(root, None, None, 0, &mut None));
        assert_eq!(counted, self.len, "len counts the entries");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A small deterministic generator (xorshift), so failures replay.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn agrees_with_btreemap_under_random_writes_and_keeps_old_versions() {
        let mut state = 0x9e37_79b9_7f4a_7c15;
        let mut map: PackedMap<u32, u64> = PackedMap::new();
        let mut model = BTreeMap::new();
        let mut versions = Vec::new();
        for step in 0..20_000u64 {
            let key = (next(&mut state) % 2_000) as u32;
            if next(&mut state).is_multiple_of(3) {
                assert_eq!(map.remove(&key), model.remove(&key));
            } else {
                assert_eq!(map.insert(key, step), model.insert(key, step));
            }
            if step.is_multiple_of(1_000) {
                map.check();
                assert_eq!(map.first_value(), model.values().next());
                versions.push((map.clone(), model.clone()));
            }
            if step.is_multiple_of(97) {
                if let Some(v) = map.get_mut(&key) {
                    *v += 1;
                    *model.get_mut(&key).unwrap() += 1;
                }
            }
        }
        map.check();
        assert!(map.iter().map(|(k, v)| (*k, *v)).eq(model.clone()));
        assert_eq!(map.len(), model.len());
        // Removing everything empties the map and frees the root.
        let keys: Vec<u32> = model.keys().copied().collect();
        for key in keys {
            assert!(map.remove(&key).is_some());
        }
        assert!(map.is_empty() && map.root.is_none());
        // Every earlier version still reads as it was.
        for (version, model) in versions {
            version.check();
            assert!(version.iter().map(|(k, v)| (*k, *v)).eq(model));
        }
    }

    #[test]
    fn in_order_inserts_fill_leaves() {
        let map: PackedMap<u32, ()> = (0..1_000).map(|k| (k, ())).collect();
        map.check();
        let mut leaves = 0;
        let mut stack = vec![map.root.as_deref().unwrap()];
        while let Some(node) = stack.pop() {
            match node {
                Node::Leaf(_) => leaves += 1,
                Node::Branch(b) => stack.extend(b.children.iter().map(|c| &**c)),
            }
        }
        assert_eq!(leaves, 1_000usize.div_ceil(LEAF_ENTRIES_MAX));
    }

    #[test]
    fn mutable_iteration_copies_shared_nodes_only() {
        let mut map: PackedMap<u32, u32> = (0..100).map(|k| (k, k)).collect();
        let before = map.clone();
        for v in map.values_mut() {
            *v += 1;
        }
        for (k, v) in map.iter_mut() {
            assert_eq!(*k + 1, *v);
        }
        assert!(
            before.iter().all(|(k, v)| k == v),
            "the old version is untouched"
        );
        assert!(map.get(&5) == Some(&6) && map.contains_key(&99) && !map.contains_key(&100));
    }
}
