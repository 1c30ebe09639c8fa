//! The `kvs` table's rows: a persistent (copy-on-write) B+tree whose leaves are byte-packed.
//!
//! A row costs what its bytes cost plus a few: a leaf is one allocation holding the packed
//! rows of up to [`LEAF_BYTES_MAX`] bytes back to back (the layout of `entry.rs`: a tag, the
//! indexes as varints, the rare fields, the key, the value), preceded by where each starts.
//! There is no allocation, reference count, pointer or allocator size-class rounding per
//! row: about 10 bytes beside the key and value, where a row of its own cost 50–70 (its
//! header, the tree's slot for it and the rounding up to the allocator's next class).
//!
//! Values longer than [`VALUE_INLINE_BYTES_MAX`] are kept beside the leaf, each in a buffer
//! of exactly its size shared by the versions that hold it; the row names its slot.
//!
//! Versions share everything they did not write: a write copies the one leaf it changes
//! (a few KiB) and the branches above it, and a copy of a branch copies pointers. Readers
//! get [`KvRow`]s, views borrowed from the version they read.
//!
//! Invariants (checked by `check` in tests): the rows of a leaf are in strictly increasing
//! key order and every key of a child is at or above its separator and below the next one;
//! no leaf is empty except the root of an empty table; a branch's `len` is its rows' count.
//! A leaf is split when a write takes it past `LEAF_BYTES_MAX` (so only rows larger than
//! half of that can leave one above it).

use super::entry::{pack, unpack, KvEntry, KvFields, VALUE_INLINE_BYTES_MAX};
use bytes::Bytes;
use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// Packed bytes a leaf holds before it splits: a write copies at most about this much.
pub const LEAF_BYTES_MAX: usize = 4096;
/// Children of a branch before it splits.
const BRANCH_CHILDREN_MAX: usize = 32;
/// Bytes of a row's start offset in its leaf.
const START_BYTES: usize = 4;
/// What a value kept beside the leaf counts towards the leaf's size (its handle).
const OUTSIDE_HANDLE_BYTES: usize = std::mem::size_of::<Bytes>();

/// One row, borrowed from the table version it was read from.
#[derive(Clone, Copy)]
pub struct KvRow<'a> {
    packed: &'a [u8],
    outside: Option<&'a [u8]>,
}

impl<'a> KvRow<'a> {
    /// Every field, decoded in one pass.
    pub fn fields(self) -> KvFields<'a> {
        let (mut fields, slot) = unpack(self.packed);
        if slot.is_some() {
            fields.value = self.outside.expect("a row with an outside value has it");
        }
        fields
    }

    pub fn key(self) -> &'a str {
        unpack(self.packed).0.key
    }

    pub fn value(self) -> &'a [u8] {
        self.fields().value
    }

    pub fn flags(self) -> u64 {
        self.fields().flags
    }

    pub fn session(self) -> Option<&'a str> {
        self.fields().session
    }

    pub fn lock_index(self) -> u64 {
        self.fields().lock_index
    }

    pub fn create_index(self) -> u64 {
        self.fields().create_index
    }

    pub fn modify_index(self) -> u64 {
        self.fields().modify_index
    }

    /// An owned copy, for results that outlive the version.
    pub fn to_entry(self) -> KvEntry {
        KvEntry::new(self.fields())
    }

    /// An owned copy with the value left out, as transactions report writes.
    pub fn without_value(self) -> KvEntry {
        KvEntry::new(KvFields {
            value: &[],
            ..self.fields()
        })
    }
}

impl PartialEq for KvRow<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.fields() == other.fields()
    }
}

impl fmt::Debug for KvRow<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::entry::debug_fields(self.fields(), f)
    }
}

impl serde::Serialize for KvRow<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        super::entry::serialize_fields(self.fields(), serializer)
    }
}

/// A leaf: `count` row start offsets (u32, little endian), then the packed rows; the values
/// kept beside it, by slot.
struct Leaf {
    bytes: Box<[u8]>,
    count: u32,
    outside: Box<[Bytes]>,
}

impl Leaf {
    fn empty() -> Leaf {
        Leaf {
            bytes: Box::default(),
            count: 0,
            outside: Box::default(),
        }
    }

    fn len(&self) -> usize {
        self.count as usize
    }

    fn start(&self, i: usize) -> usize {
        let at = i * START_BYTES;
        u32::from_le_bytes(
            self.bytes[at..at + START_BYTES]
                .try_into()
                .expect("4 bytes"),
        ) as usize
    }

    fn packed(&self, i: usize) -> &[u8] {
        let end = if i + 1 < self.len() {
            self.start(i + 1)
        } else {
            self.bytes.len()
        };
        &self.bytes[self.start(i)..end]
    }

    fn row(&self, i: usize) -> KvRow<'_> {
        let packed = self.packed(i);
        let outside = unpack(packed)
            .1
            .map(|slot| &self.outside[slot as usize][..]);
        KvRow { packed, outside }
    }

    fn key(&self, i: usize) -> &str {
        unpack(self.packed(i)).0.key
    }

    /// What row `i` counts towards [`LEAF_BYTES_MAX`].
    fn row_size(&self, i: usize) -> usize {
        let packed = self.packed(i);
        let handle = if unpack(packed).1.is_some() {
            OUTSIDE_HANDLE_BYTES
        } else {
            0
        };
        START_BYTES + packed.len() + handle
    }

    /// The position of `key`, or where it would go.
    fn search(&self, key: &str) -> Result<usize, usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match self.key(mid).cmp(key) {
                Ordering::Less => low = mid + 1,
                Ordering::Greater => high = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(low)
    }
}

/// Rows being packed into a new leaf, in key order.
#[derive(Default)]
struct LeafBuilder {
    starts: Vec<u32>,
    rows: Vec<u8>,
    outside: Vec<Bytes>,
}

impl LeafBuilder {
    fn len(&self) -> usize {
        self.starts.len()
    }

    /// What the leaf would count towards [`LEAF_BYTES_MAX`].
    fn size(&self) -> usize {
        self.starts.len() * START_BYTES
            + self.rows.len()
            + self.outside.len() * OUTSIDE_HANDLE_BYTES
    }

    /// Adds a new row built from `fields`.
    fn push_fields(&mut self, fields: &KvFields<'_>) {
        self.starts.push(self.rows.len() as u32);
        if fields.value.len() > VALUE_INLINE_BYTES_MAX {
            pack(fields, Some(self.outside.len() as u64), &mut self.rows);
            self.outside.push(Bytes::copy_from_slice(fields.value));
        } else {
            pack(fields, None, &mut self.rows);
        }
    }

    /// Adds row `i` of `leaf` as it is (its outside value shared, in this leaf's next slot).
    fn push_row(&mut self, leaf: &Leaf, i: usize) {
        let packed = leaf.packed(i);
        let (fields, slot) = unpack(packed);
        self.starts.push(self.rows.len() as u32);
        match slot {
            None => self.rows.extend_from_slice(packed),
            Some(slot) => {
                pack(&fields, Some(self.outside.len() as u64), &mut self.rows);
                self.outside.push(leaf.outside[slot as usize].clone());
            }
        }
    }

    fn push(&mut self, leaf: &Leaf, source: Source<'_, '_>) {
        match source {
            Source::Kept(i) => self.push_row(leaf, i),
            Source::Written(fields) => self.push_fields(fields),
        }
    }

    /// The rows as a leaf of exactly their size; the builder is left empty.
    fn finish(&mut self) -> Leaf {
        let header = self.starts.len() * START_BYTES;
        let mut bytes = Vec::with_capacity(header + self.rows.len());
        for &start in &self.starts {
            bytes.extend_from_slice(&(header as u32 + start).to_le_bytes());
        }
        bytes.extend_from_slice(&self.rows);
        let leaf = Leaf {
            bytes: bytes.into_boxed_slice(),
            count: self.starts.len() as u32,
            outside: std::mem::take(&mut self.outside).into_boxed_slice(),
        };
        self.starts.clear();
        self.rows.clear();
        leaf
    }
}

/// One row of a leaf being rebuilt: kept from the old leaf, or the one being written.
#[derive(Clone, Copy)]
enum Source<'a, 'f> {
    Kept(usize),
    Written(&'a KvFields<'f>),
}

/// What a row written from `fields` counts towards [`LEAF_BYTES_MAX`].
fn written_size(fields: &KvFields<'_>) -> usize {
    let outside = fields.value.len() > VALUE_INLINE_BYTES_MAX;
    let mut scratch = Vec::with_capacity(64 + fields.key.len());
    pack(fields, outside.then_some(0), &mut scratch);
    START_BYTES + scratch.len() + if outside { OUTSIDE_HANDLE_BYTES } else { 0 }
}

/// Builds one leaf of `sources` taken from `leaf`.
fn build_leaf(leaf: &Leaf, sources: &[Source<'_, '_>]) -> Leaf {
    let mut builder = LeafBuilder::default();
    for &source in sources {
        builder.push(leaf, source);
    }
    builder.finish()
}

#[derive(Clone)]
enum Node {
    Leaf(Arc<Leaf>),
    Branch(Arc<Branch>),
}

/// Children in key order; `separators[i]` is a lower bound of `children[i + 1]`'s keys and
/// above every key of `children[i]`.
#[derive(Clone)]
struct Branch {
    children: Vec<Node>,
    separators: Vec<Arc<str>>,
    len: usize,
}

impl Branch {
    /// The child whose range holds `key`.
    fn child_for(&self, key: &str) -> usize {
        self.separators
            .partition_point(|separator| &**separator <= key)
    }
}

impl Node {
    fn len(&self) -> usize {
        match self {
            Node::Leaf(leaf) => leaf.len(),
            Node::Branch(branch) => branch.len,
        }
    }

    /// Inserts or replaces the row of `fields.key`. Returns whether a row was added (not
    /// replaced), and the right half if this node split.
    fn insert(&mut self, fields: &KvFields<'_>) -> (bool, Option<(Arc<str>, Node)>) {
        match self {
            Node::Leaf(leaf) => {
                let (at, added) = match leaf.search(fields.key) {
                    Ok(at) => (at, false),
                    Err(at) => (at, true),
                };
                let skip = usize::from(!added);
                let mut sources: Vec<Source> = (0..at).map(Source::Kept).collect();
                sources.push(Source::Written(fields));
                sources.extend((at + skip..leaf.len()).map(Source::Kept));
                let sizes: Vec<usize> = sources
                    .iter()
                    .map(|source| match source {
                        Source::Kept(i) => leaf.row_size(*i),
                        Source::Written(fields) => written_size(fields),
                    })
                    .collect();
                let total: usize = sizes.iter().sum();
                if total <= LEAF_BYTES_MAX || sources.len() < 2 {
                    *self = Node::Leaf(Arc::new(build_leaf(leaf, &sources)));
                    return (added, None);
                }
                // Keys written in increasing order (a load) leave full leaves behind them:
                // a row added at the end starts the next leaf alone. Otherwise the bytes
                // are halved.
                let split = if added && at == leaf.len() {
                    sources.len() - 1
                } else {
                    let mut before = 0;
                    let half = sizes.iter().take_while(|&&size| {
                        before += size;
                        before <= total / 2
                    });
                    half.count().clamp(1, sources.len() - 1)
                };
                let left = build_leaf(leaf, &sources[..split]);
                let right = build_leaf(leaf, &sources[split..]);
                let separator: Arc<str> = Arc::from(right.key(0));
                *self = Node::Leaf(Arc::new(left));
                (added, Some((separator, Node::Leaf(Arc::new(right)))))
            }
            Node::Branch(branch) => {
                let branch = Arc::make_mut(branch);
                let i = branch.child_for(fields.key);
                let (added, split) = branch.children[i].insert(fields);
                branch.len += usize::from(added);
                if let Some((separator, right)) = split {
                    branch.children.insert(i + 1, right);
                    branch.separators.insert(i, separator);
                }
                if branch.children.len() <= BRANCH_CHILDREN_MAX {
                    return (added, None);
                }
                let middle = branch.children.len() / 2;
                let children = branch.children.split_off(middle);
                let mut separators = branch.separators.split_off(middle - 1);
                let separator = separators.remove(0);
                let right_len: usize = children.iter().map(Node::len).sum();
                branch.len -= right_len;
                let right = Branch {
                    children,
                    separators,
                    len: right_len,
                };
                (added, Some((separator, Node::Branch(Arc::new(right)))))
            }
        }
    }

    /// Removes the row of `key`, returning it.
    fn remove(&mut self, key: &str) -> Option<KvEntry> {
        match self {
            Node::Leaf(leaf) => {
                let at = leaf.search(key).ok()?;
                let removed = leaf.row(at).to_entry();
                let sources: Vec<Source> = (0..leaf.len())
                    .filter(|&i| i != at)
                    .map(Source::Kept)
                    .collect();
                *self = Node::Leaf(Arc::new(build_leaf(leaf, &sources)));
                Some(removed)
            }
            Node::Branch(branch) => {
                let i = branch.child_for(key);
                // Look before copying: a miss must not copy the path.
                if !branch.children[i].contains(key) {
                    return None;
                }
                let branch = Arc::make_mut(branch);
                let removed = branch.children[i].remove(key);
                debug_assert!(removed.is_some(), "the row was found above");
                branch.len -= 1;
                if branch.children[i].len() == 0 {
                    // An empty child goes with its separator (the next one for the first
                    // child); a branch left empty is removed by its parent the same way.
                    branch.children.remove(i);
                    if !branch.separators.is_empty() {
                        branch.separators.remove(i.saturating_sub(1));
                    }
                }
                removed
            }
        }
    }

    fn get(&self, key: &str) -> Option<KvRow<'_>> {
        let mut node = self;
        loop {
            match node {
                Node::Branch(branch) => node = &branch.children[branch.child_for(key)],
                Node::Leaf(leaf) => return leaf.search(key).ok().map(|at| leaf.row(at)),
            }
        }
    }

    fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

/// The rows of the `kvs` table in key order. Cloning shares every node.
#[derive(Clone)]
pub struct KvRows {
    root: Node,
}

impl Default for KvRows {
    fn default() -> Self {
        KvRows {
            root: Node::Leaf(Arc::new(Leaf::empty())),
        }
    }
}

impl KvRows {
    pub fn get(&self, key: &str) -> Option<KvRow<'_>> {
        self.root.get(key)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.root.contains(key)
    }

    pub fn len(&self) -> usize {
        self.root.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every row, in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter::from(&self.root, None)
    }

    /// The rows whose key starts with `prefix`, in key order.
    pub fn prefix<'m, 'p>(
        &'m self,
        prefix: &'p str,
    ) -> impl Iterator<Item = KvRow<'m>> + use<'m, 'p> {
        Iter::from(&self.root, Some(prefix)).take_while(move |row| row.key().starts_with(prefix))
    }

    /// Whether both share their whole tree (nothing was written between them).
    pub fn ptr_eq(&self, other: &KvRows) -> bool {
        match (&self.root, &other.root) {
            (Node::Leaf(a), Node::Leaf(b)) => Arc::ptr_eq(a, b),
            (Node::Branch(a), Node::Branch(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Adds the row `fields` describes, replacing the row with the same key.
    pub(super) fn insert(&mut self, fields: KvFields<'_>) {
        let (_, split) = self.root.insert(&fields);
        if let Some((separator, right)) = split {
            let left = self.root.clone();
            let len = left.len() + right.len();
            self.root = Node::Branch(Arc::new(Branch {
                children: vec![left, right],
                separators: vec![separator],
                len,
            }));
        }
    }

    pub(super) fn remove(&mut self, key: &str) -> Option<KvEntry> {
        let removed = self.root.remove(key)?;
        // A branch left with one child (or none) gives way to it.
        while let Node::Branch(branch) = &self.root {
            match branch.children.len() {
                0 => self.root = Node::Leaf(Arc::new(Leaf::empty())),
                1 => self.root = branch.children[0].clone(),
                _ => break,
            }
        }
        Some(removed)
    }

    /// Builds the table from rows in strictly increasing key order (see [`SortedLoader`]).
    #[cfg(test)]
    pub(super) fn from_sorted<'a>(
        rows: impl IntoIterator<Item = KvFields<'a>>,
    ) -> Result<KvRows, String> {
        let mut loader = SortedLoader::default();
        for fields in rows {
            loader.push(&fields)?;
        }
        Ok(loader.finish())
    }

    /// Checks the structure's invariants (see the module documentation); for tests.
    #[cfg(test)]
    pub(super) fn check(&self) {
        fn walk(node: &Node, low: Option<&str>, high: Option<&str>, root: bool) -> usize {
            match node {
                Node::Leaf(leaf) => {
                    assert!(root || leaf.len() > 0, "an empty leaf below the root");
                    for i in 0..leaf.len() {
                        let key = leaf.key(i);
                        assert!(low.is_none_or(|low| low <= key), "{key:?} below {low:?}");
                        assert!(
                            high.is_none_or(|high| key < high),
                            "{key:?} not below {high:?}"
                        );
                        if i > 0 {
                            assert!(leaf.key(i - 1) < key, "rows out of order");
                        }
                        let _ = leaf.row(i).fields();
                    }
                    leaf.len()
                }
                Node::Branch(branch) => {
                    assert_eq!(branch.separators.len() + 1, branch.children.len());
                    assert!(branch.children.len() >= 2 || !root);
                    let mut total = 0;
                    for (i, child) in branch.children.iter().enumerate() {
                        let low = if i == 0 {
                            low
                        } else {
                            Some(&*branch.separators[i - 1])
                        };
                        let high = branch.separators.get(i).map(|s| &**s).or(high);
                        total += walk(child, low, high, false);
                    }
                    assert_eq!(total, branch.len, "a branch's count");
                    total
                }
            }
        }
        walk(&self.root, None, None, true);
    }
}

/// Builds a table from rows given in strictly increasing key order (a snapshot's rows
/// arrive this way), filling leaves and branches as full as they go. A row out of order is
/// an error.
#[derive(Default)]
pub(super) struct SortedLoader {
    leaves: Vec<(Arc<str>, Node)>,
    builder: LeafBuilder,
    last_key: Option<String>,
}

impl SortedLoader {
    pub(super) fn push(&mut self, fields: &KvFields<'_>) -> Result<(), String> {
        if let Some(last) = &self.last_key {
            if fields.key <= last.as_str() {
                return Err(format!(
                    "KV rows out of order: {:?} after {last:?}",
                    fields.key
                ));
            }
        }
        if self.builder.len() > 0 && self.builder.size() + written_size(fields) > LEAF_BYTES_MAX {
            self.finish_leaf();
        }
        self.builder.push_fields(fields);
        match &mut self.last_key {
            Some(last) => {
                last.clear();
                last.push_str(fields.key);
            }
            None => self.last_key = Some(fields.key.to_string()),
        }
        Ok(())
    }

    fn finish_leaf(&mut self) {
        let leaf = self.builder.finish();
        self.leaves
            .push((Arc::from(leaf.key(0)), Node::Leaf(Arc::new(leaf))));
    }

    pub(super) fn finish(mut self) -> KvRows {
        if self.builder.len() > 0 {
            self.finish_leaf();
        }
        let mut level = std::mem::take(&mut self.leaves);
        while level.len() > 1 {
            let mut above = Vec::with_capacity(level.len().div_ceil(BRANCH_CHILDREN_MAX));
            let mut rest = level.into_iter().peekable();
            while rest.peek().is_some() {
                let group: Vec<(Arc<str>, Node)> =
                    rest.by_ref().take(BRANCH_CHILDREN_MAX).collect();
                let first = group[0].0.clone();
                let len = group.iter().map(|(_, node)| node.len()).sum();
                let mut separators = Vec::with_capacity(group.len() - 1);
                let mut children = Vec::with_capacity(group.len());
                for (i, (key, node)) in group.into_iter().enumerate() {
                    if i > 0 {
                        separators.push(key);
                    }
                    children.push(node);
                }
                let branch = Branch {
                    children,
                    separators,
                    len,
                };
                above.push((first, Node::Branch(Arc::new(branch))));
            }
            level = above;
        }
        match level.pop() {
            Some((_, root)) => KvRows { root },
            None => KvRows::default(),
        }
    }
}

impl fmt::Debug for KvRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|row| (row.key(), row)))
            .finish()
    }
}

/// Rows in key order.
pub struct Iter<'a> {
    /// The branches above the current leaf, with the position taken in each.
    path: Vec<(&'a Branch, usize)>,
    leaf: &'a Leaf,
    at: usize,
}

impl<'a> Iter<'a> {
    /// From the first row (or the first at or after `from`).
    fn from(root: &'a Node, from: Option<&str>) -> Iter<'a> {
        let mut path = Vec::new();
        let mut node = root;
        loop {
            match node {
                Node::Branch(branch) => {
                    let i = from.map_or(0, |key| branch.child_for(key));
                    path.push((&**branch, i));
                    node = &branch.children[i];
                }
                Node::Leaf(leaf) => {
                    let at = from.map_or(0, |key| leaf.search(key).unwrap_or_else(|at| at));
                    return Iter { path, leaf, at };
                }
            }
        }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = KvRow<'a>;

    fn next(&mut self) -> Option<KvRow<'a>> {
        while self.at >= self.leaf.len() {
            // Up to the first branch with a child left, then down its leftmost path.
            let mut node = loop {
                let (branch, i) = self.path.last_mut()?;
                *i += 1;
                let branch: &'a Branch = branch;
                if let Some(child) = branch.children.get(*i) {
                    break child;
                }
                self.path.pop();
            };
            loop {
                match node {
                    Node::Branch(branch) => {
                        self.path.push((&**branch, 0));
                        node = &branch.children[0];
                    }
                    Node::Leaf(leaf) => {
                        self.leaf = &**leaf;
                        self.at = 0;
                        break;
                    }
                }
            }
        }
        let row = self.leaf.row(self.at);
        self.at += 1;
        Some(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn fields<'a>(key: &'a str, value: &'a [u8], index: u64) -> KvFields<'a> {
        KvFields {
            key,
            value,
            flags: index % 3,
            session: index.is_multiple_of(5).then_some("s"),
            lock_index: index % 7,
            create_index: index,
            modify_index: index * 2,
        }
    }

    /// A deterministic mix of keys: `count` of them, spread over the key space.
    fn keys(count: u64) -> Vec<String> {
        (0..count)
            .map(|i| format!("k/{:08}", i.wrapping_mul(2_654_435_761) % 100_000_007))
            .collect()
    }

    fn value_for(i: usize) -> Vec<u8> {
        // Mostly short values, some long enough to live beside the leaf.
        let len = if i.is_multiple_of(11) {
            VALUE_INLINE_BYTES_MAX + 1 + i % 300
        } else {
            i % 150
        };
        vec![(i % 251) as u8; len]
    }

    #[test]
    fn inserts_replacements_and_removes_match_a_btreemap() {
        let mut rows = KvRows::default();
        let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let keys = keys(3000);
        for (i, key) in keys.iter().enumerate() {
            let value = value_for(i);
            rows.insert(fields(key, &value, i as u64));
            model.insert(key.clone(), value);
        }
        rows.check();
        // Replace every third, remove every fourth.
        for (i, key) in keys.iter().enumerate() {
            if i % 3 == 0 {
                let value = value_for(i + 1);
                rows.insert(fields(key, &value, i as u64 + 1));
                model.insert(key.clone(), value);
            }
            if i % 4 == 0 {
                let removed = rows.remove(key).expect("present");
                assert_eq!(removed.key(), key);
                assert_eq!(removed.value(), &model.remove(key).unwrap()[..]);
                assert!(rows.remove(key).is_none());
            }
        }
        rows.check();
        assert_eq!(rows.len(), model.len());
        let listed: Vec<(String, Vec<u8>)> = rows
            .iter()
            .map(|row| (row.key().to_string(), row.value().to_vec()))
            .collect();
        let expected: Vec<(String, Vec<u8>)> = model.into_iter().collect();
        assert_eq!(listed, expected);
        for (key, value) in &expected {
            assert_eq!(rows.get(key).map(|row| row.value()), Some(&value[..]));
        }
        assert!(rows.get("k/").is_none());
        assert!(!rows.contains_key("zzz"));
        // Everything removed leaves an empty table.
        for (key, _) in &expected {
            rows.remove(key).expect("present");
        }
        rows.check();
        assert!(rows.is_empty());
        assert_eq!(rows.iter().count(), 0);
    }

    #[test]
    fn every_field_survives_the_leaf() {
        let mut rows = KvRows::default();
        let long = vec![3u8; VALUE_INLINE_BYTES_MAX + 10];
        let written = [
            fields("a", b"", 0),
            fields("b", b"short", 5),
            fields("c", &long, 10),
            KvFields {
                flags: u64::MAX,
                lock_index: u64::MAX,
                create_index: u64::MAX,
                modify_index: u64::MAX,
                ..fields("d/ключ", &long, 1)
            },
        ];
        for f in written {
            rows.insert(f);
        }
        for f in written {
            assert_eq!(rows.get(f.key).unwrap().fields(), f);
            assert_eq!(rows.get(f.key).unwrap().to_entry().fields(), f);
        }
    }

    #[test]
    fn versions_share_what_they_did_not_write() {
        let mut rows = KvRows::default();
        let keys = keys(2000);
        for (i, key) in keys.iter().enumerate() {
            rows.insert(fields(key, b"value", i as u64));
        }
        let before = rows.clone();
        assert!(before.ptr_eq(&rows));
        rows.insert(fields(&keys[7], b"changed", 9999));
        rows.remove(&keys[8]);
        assert!(!before.ptr_eq(&rows));
        // The old version still reads as it was.
        assert_eq!(before.get(&keys[7]).unwrap().value(), b"value");
        assert!(before.get(&keys[8]).is_some());
        assert_eq!(before.len(), 2000);
        assert_eq!(rows.len(), 1999);
        before.check();
        rows.check();
        // A miss copies nothing.
        let again = rows.clone();
        assert!(rows.remove("not there").is_none());
        assert!(again.ptr_eq(&rows));
    }

    #[test]
    fn prefixes_and_ranges_cross_leaves() {
        let mut rows = KvRows::default();
        for i in 0..2000u64 {
            let key = format!("{}/{:05}", ["a", "b", "c"][(i % 3) as usize], i);
            rows.insert(fields(&key, &[1u8; 40], i));
        }
        let b: Vec<&str> = rows.prefix("b/").map(KvRow::key).collect();
        assert_eq!(b.len(), 667);
        assert!(b.iter().all(|k| k.starts_with("b/")));
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(rows.prefix("").count(), 2000);
        assert_eq!(rows.prefix("b/0199").count(), 4);
        assert_eq!(rows.prefix("d").count(), 0);
        assert_eq!(rows.prefix("a/99999").count(), 0);
    }

    #[test]
    fn loading_in_key_order_fills_leaves() {
        let mut rows = KvRows::default();
        for i in 0..5000u64 {
            let key = format!("load/{i:012}");
            rows.insert(fields(&key, &[b'v'; 100], i));
        }
        rows.check();
        let bulk = KvRows::from_sorted(rows.iter().map(KvRow::fields)).unwrap();
        bulk.check();
        assert_eq!(bulk.len(), 5000);
        assert!(bulk.iter().eq(rows.iter()));
        // Both are nearly full: the leaves' bytes are within a row of the limit.
        fn leaves(node: &Node, out: &mut Vec<usize>) {
            match node {
                Node::Leaf(leaf) => out.push(leaf.bytes.len()),
                Node::Branch(branch) => branch.children.iter().for_each(|c| leaves(c, out)),
            }
        }
        for table in [&rows, &bulk] {
            let mut sizes = Vec::new();
            leaves(&table.root, &mut sizes);
            let last = sizes.pop().unwrap();
            assert!(last > 0);
            assert!(sizes.iter().all(|&s| s > LEAF_BYTES_MAX - 200), "{sizes:?}");
        }
        assert!(KvRows::from_sorted([fields("b", b"", 1), fields("a", b"", 2)]).is_err());
        assert!(KvRows::from_sorted([]).unwrap().is_empty());
    }
}
