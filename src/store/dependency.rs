//! What a read depended on, and which changes invalidate it: the read half of the change set.
//!
//! An apply reports what it wrote as [`Change`]s; a read reports what it looked at as
//! [`Dependencies`]. A change invalidates a read exactly when [`invalidates`] says so, and
//! every consumer of the two — the shard's watch registry (parked blocking queries) and the
//! DNS answer cache — matches them through one [`DependencyIndex`], which implements that
//! rule with hash lookups instead of comparing every pair.
//!
//! The rule:
//! - a change and a dependency meet only within one [`Table`];
//! - a whole-table dependency meets every change of its table, and a whole-table change
//!   (`ChangeKey::All`) every dependency of its table;
//! - keys meet when equal; a prefix meets every key that starts with it (the empty prefix
//!   meets them all); two prefixes meet when one starts with the other;
//! - keys are compared in their table's canonical form, [`canonical_key`]: folded to
//!   lowercase where Consul matches names case-insensitively, exact where it does not
//!   ([`key_case`] says which, table by table). [`Dependencies`] canonicalizes what it is
//!   given when the read records it, and a change key is canonicalized when it is matched;
//!   the store emits canonical change keys (the apply asserts it), so on the hot paths that
//!   is a scan of the key's bytes that finds nothing to fold and allocates nothing.
//!
//! Pure: no I/O, no clock.

use super::catalog::rows::fold;
use super::{Change, ChangeKey, Table, TABLE_COUNT};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// How a table compares the keys of its changes and dependencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyCase {
    /// Byte for byte.
    Exact,
    /// Folded to lowercase first ([`fold`]: ASCII fast path, Unicode lowercase otherwise).
    Folded,
}

/// The case rule of each table, in one place: it must match how the table's rows are looked
/// up. Consul's state store indexes node names, service names and IDs, check IDs,
/// coordinates' nodes and config entries' kind and name lowercased; KV keys are exact, and
/// so are the IDs praetor's tables look up byte for byte (sessions, and the ID-keyed tables
/// still to come: ACL tokens, prepared queries, intentions).
pub const fn key_case(table: Table) -> KeyCase {
    match table {
        Table::Nodes
        | Table::Services
        | Table::Checks
        | Table::ServiceIndex
        | Table::NodeServices
        | Table::Coordinates
        | Table::ConfigEntries
        | Table::GatewayServices
        | Table::Peerings
        | Table::PeeringTrustBundles
        | Table::ImportedServices => KeyCase::Folded,
        // `Sessions` keys are session IDs, and `node:<folded node>` for a node's sessions
        // (`session::node_watch_key` folds the node part itself).
        Table::Kvs
        | Table::Tombstones
        | Table::Sessions
        | Table::PreparedQueries
        | Table::Acl
        | Table::Intentions
        | Table::Events
        | Table::ConnectCa
        | Table::FederationStates => KeyCase::Exact,
    }
}

/// `key` in `table`'s canonical form; borrowed when it already is.
pub fn canonical_key(table: Table, key: &str) -> Cow<'_, str> {
    match key_case(table) {
        KeyCase::Exact => Cow::Borrowed(key),
        KeyCase::Folded => match fold(key) {
            // `fold` copies every non-ASCII key; keep the original when nothing changed.
            Cow::Owned(folded) if folded == key => Cow::Borrowed(key),
            other => other,
        },
    }
}

/// Whether `key` is already in `table`'s canonical form.
pub fn is_canonical(table: Table, key: &str) -> bool {
    matches!(canonical_key(table, key), Cow::Borrowed(_))
}

/// The canonical form of a shared key, reusing its allocation when it is already canonical.
fn canonical_arc(table: Table, key: Arc<str>) -> Arc<str> {
    match canonical_key(table, &key) {
        Cow::Borrowed(_) => key,
        Cow::Owned(folded) => Arc::from(folded),
    }
}

/// One thing a read depended on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dependency {
    /// One row (or one watch-namespace key such as a service's index), by canonical key.
    Key(Table, Arc<str>),
    /// Every row whose canonical key starts with this prefix.
    Prefix(Table, Arc<str>),
    /// Anything in the table.
    Table(Table),
}

impl Dependency {
    pub fn table(&self) -> Table {
        match self {
            Dependency::Key(table, _) | Dependency::Prefix(table, _) | Dependency::Table(table) => {
                *table
            }
        }
    }

    /// The same dependency with its key in canonical form.
    fn canonical(self) -> Dependency {
        match self {
            Dependency::Key(table, key) => Dependency::Key(table, canonical_arc(table, key)),
            Dependency::Prefix(table, prefix) => {
                Dependency::Prefix(table, canonical_arc(table, prefix))
            }
            whole @ Dependency::Table(_) => whole,
        }
    }

    fn is_canonical(&self) -> bool {
        match self {
            Dependency::Key(table, key) | Dependency::Prefix(table, key) => {
                is_canonical(*table, key)
            }
            Dependency::Table(_) => true,
        }
    }
}

/// The rule: whether `change` may alter the result of a read that depended on `dependency`.
pub fn invalidates(change: &Change, dependency: &Dependency) -> bool {
    if change.table != dependency.table() {
        return false;
    }
    let change = canonical_change_key(change);
    let dependency = dependency.clone().canonical();
    match (&change, &dependency) {
        (_, Dependency::Table(_)) | (ChangeKey::All, _) => true,
        (ChangeKey::Key(key), Dependency::Key(_, read)) => **key == **read,
        (ChangeKey::Key(key), Dependency::Prefix(_, prefix)) => key.starts_with(&**prefix),
        (ChangeKey::Prefix(changed), Dependency::Key(_, read)) => read.starts_with(&**changed),
        (ChangeKey::Prefix(changed), Dependency::Prefix(_, prefix)) => {
            prefix.starts_with(&**changed) || changed.starts_with(&**prefix)
        }
    }
}

/// A change's key in its table's canonical form.
fn canonical_change_key(change: &Change) -> ChangeKey {
    match &change.key {
        ChangeKey::Key(key) => ChangeKey::Key(canonical_arc(change.table, key.clone())),
        ChangeKey::Prefix(prefix) => ChangeKey::Prefix(canonical_arc(change.table, prefix.clone())),
        ChangeKey::All => ChangeKey::All,
    }
}

/// Everything one read depended on: canonical, without repeats, in the order added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependencies {
    list: Vec<Dependency>,
}

impl Dependencies {
    pub fn new() -> Self {
        Dependencies::default()
    }
    /// Adds one row (builder form, for a query's `evaluate`).
    pub fn key(mut self, table: Table, key: impl Into<Arc<str>>) -> Self {
        self.add(Dependency::Key(table, key.into()));
        self
    }
    /// Adds a key prefix (builder form).
    pub fn prefix(mut self, table: Table, prefix: impl Into<Arc<str>>) -> Self {
        self.add(Dependency::Prefix(table, prefix.into()));
        self
    }
    /// Adds a whole table (builder form).
    pub fn table(mut self, table: Table) -> Self {
        self.add(Dependency::Table(table));
        self
    }
    /// Adds one row, copying the key only when it is new (for a read recording as it goes).
    pub fn add_key(&mut self, table: Table, key: &str) {
        let key = canonical_key(table, key);
        let seen = self
            .list
            .iter()
            .any(|d| matches!(d, Dependency::Key(t, k) if *t == table && **k == *key));
        if !seen {
            self.list.push(Dependency::Key(table, Arc::from(&*key)));
        }
    }
    /// Adds a whole table.
    pub fn add_table(&mut self, table: Table) {
        self.add(Dependency::Table(table));
    }
    /// Adds a dependency, canonicalizing its key.
    pub fn add(&mut self, dependency: Dependency) {
        let dependency = dependency.canonical();
        if !self.list.contains(&dependency) {
            self.list.push(dependency);
        }
    }
    pub fn as_slice(&self) -> &[Dependency] {
        &self.list
    }
    pub fn len(&self) -> usize {
        self.list.len()
    }
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    /// Whether any of these dependencies meets `change`.
    pub fn invalidated_by(&self, change: &Change) -> bool {
        self.list.iter().any(|d| invalidates(change, d))
    }
    /// The dependencies, with fine-grained ones replaced by their whole tables when there
    /// are more than `keys_max` of them: one coarse entry costs less than many fine ones,
    /// and only wakes too often.
    pub fn coarsened(&self, keys_max: usize) -> Vec<Dependency> {
        if self.list.len() <= keys_max {
            return self.list.clone();
        }
        let mut tables: Vec<Table> = self.list.iter().map(Dependency::table).collect();
        tables.sort();
        tables.dedup();
        tables.into_iter().map(Dependency::Table).collect()
    }
}

/// Values (parked queries, cached answers) filed under the dependencies they were read
/// with, so that a change finds exactly the values it invalidates: O(values of the key plus
/// the distinct prefix lengths filed in its table) per changed key, never O(all values).
///
/// A value filed under several dependencies appears once per dependency; taking it out
/// under one leaves the others behind (callers keep their own count of such stale entries).
pub struct DependencyIndex<V> {
    tables: [TableIndex<V>; TABLE_COUNT],
}

struct TableIndex<V> {
    keys: HashMap<Arc<str>, Vec<V>, ahash::RandomState>,
    prefixes: HashMap<Arc<str>, Vec<V>, ahash::RandomState>,
    /// Distinct prefix lengths in `prefixes`, with how many prefixes have each length.
    prefix_lengths: BTreeMap<usize, usize>,
    whole: Vec<V>,
}

impl<V> Default for TableIndex<V> {
    fn default() -> Self {
        TableIndex {
            keys: HashMap::default(),
            prefixes: HashMap::default(),
            prefix_lengths: BTreeMap::new(),
            whole: Vec::new(),
        }
    }
}

impl<V> Default for DependencyIndex<V> {
    fn default() -> Self {
        DependencyIndex {
            tables: std::array::from_fn(|_| TableIndex::default()),
        }
    }
}

impl<V> TableIndex<V> {
    fn forget_prefix_length(&mut self, len: usize) {
        if let Some(count) = self.prefix_lengths.get_mut(&len) {
            *count -= 1;
            if *count == 0 {
                self.prefix_lengths.remove(&len);
            }
        } else {
            debug_assert!(false, "a filed prefix has its length counted");
        }
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.prefixes.is_empty() && self.whole.is_empty()
    }
}

impl<V> DependencyIndex<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Files `value` under `dependency` (canonical, as [`Dependencies`] holds them).
    pub fn insert(&mut self, dependency: &Dependency, value: V) {
        debug_assert!(
            dependency.is_canonical(),
            "dependencies are filed canonical"
        );
        let index = &mut self.tables[dependency.table() as usize];
        match dependency {
            Dependency::Key(_, key) => match index.keys.get_mut(key) {
                Some(list) => list.push(value),
                None => {
                    index.keys.insert(key.clone(), vec![value]);
                }
            },
            Dependency::Prefix(_, prefix) => match index.prefixes.get_mut(prefix) {
                Some(list) => list.push(value),
                None => {
                    index.prefixes.insert(prefix.clone(), vec![value]);
                    *index.prefix_lengths.entry(prefix.len()).or_default() += 1;
                }
            },
            Dependency::Table(_) => index.whole.push(value),
        }
    }

    /// Takes out every value filed under a dependency that `change` invalidates (see
    /// [`invalidates`]), handing each to `take`. Allocates nothing for a one-key change.
    pub fn take_invalidated(&mut self, change: &Change, mut take: impl FnMut(V)) {
        let index = &mut self.tables[change.table as usize];
        for value in index.whole.drain(..) {
            take(value);
        }
        match &change.key {
            ChangeKey::Key(key) => {
                let key = canonical_key(change.table, key);
                if let Some(list) = index.keys.remove(&*key) {
                    list.into_iter().for_each(&mut take);
                }
                // Every filed prefix that `key` starts with: one lookup per distinct length.
                let mut shortest = 0;
                while shortest <= key.len() {
                    let Some(len) = index
                        .prefix_lengths
                        .range(shortest..=key.len())
                        .next()
                        .map(|(len, _)| *len)
                    else {
                        break;
                    };
                    shortest = len + 1;
                    if !key.is_char_boundary(len) {
                        continue;
                    }
                    if let Some(list) = index.prefixes.remove(&key[..len]) {
                        index.forget_prefix_length(len);
                        list.into_iter().for_each(&mut take);
                    }
                }
            }
            ChangeKey::Prefix(changed) => {
                let changed = canonical_key(change.table, changed);
                // A recursive delete: rare, so a scan of the table's filed keys is fine.
                let keys: Vec<Arc<str>> = index
                    .keys
                    .keys()
                    .filter(|k| k.starts_with(&*changed))
                    .cloned()
                    .collect();
                for key in keys {
                    if let Some(list) = index.keys.remove(&key) {
                        list.into_iter().for_each(&mut take);
                    }
                }
                let prefixes: Vec<Arc<str>> = index
                    .prefixes
                    .keys()
                    .filter(|p| p.starts_with(&*changed) || changed.starts_with(&***p))
                    .cloned()
                    .collect();
                for prefix in prefixes {
                    if let Some(list) = index.prefixes.remove(&prefix) {
                        index.forget_prefix_length(prefix.len());
                        list.into_iter().for_each(&mut take);
                    }
                }
            }
            ChangeKey::All => {
                for (_, list) in index.keys.drain() {
                    list.into_iter().for_each(&mut take);
                }
                for (_, list) in index.prefixes.drain() {
                    list.into_iter().for_each(&mut take);
                }
                index.prefix_lengths.clear();
            }
        }
        debug_assert_eq!(
            index.prefix_lengths.values().sum::<usize>(),
            index.prefixes.len(),
            "prefix lengths count the filed prefixes"
        );
    }

    /// Keeps only the values `keep` approves, dropping emptied lists. Returns how many
    /// values remain.
    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) -> usize {
        let mut remaining = 0;
        for index in self.tables.iter_mut() {
            index.keys.retain(|_, list| {
                list.retain(&mut keep);
                remaining += list.len();
                !list.is_empty()
            });
            let mut emptied_lengths = Vec::new();
            index.prefixes.retain(|prefix, list| {
                list.retain(&mut keep);
                remaining += list.len();
                if list.is_empty() {
                    emptied_lengths.push(prefix.len());
                }
                !list.is_empty()
            });
            for len in emptied_lengths {
                index.forget_prefix_length(len);
            }
            index.whole.retain(&mut keep);
            remaining += index.whole.len();
        }
        remaining
    }

    pub fn clear(&mut self) {
        for index in self.tables.iter_mut() {
            index.keys.clear();
            index.prefixes.clear();
            index.prefix_lengths.clear();
            index.whole.clear();
        }
    }

    /// Whether anything is filed under a dependency in `table`.
    pub fn indexes_table(&self, table: Table) -> bool {
        !self.tables[table as usize].is_empty()
    }
}

/// The (dependency, change, invalidates?) cases every consumer of the rule is checked
/// against: here for [`invalidates`] and [`DependencyIndex`], in `dns::cache` for the watch
/// registry and the DNS answer cache side by side.
#[cfg(test)]
pub(crate) fn agreement_cases() -> Vec<(Dependency, Change, bool)> {
    let key = |table, key: &str| Change::key(table, &Arc::from(key));
    let prefix = |table, prefix: &str| Change {
        table,
        key: ChangeKey::Prefix(Arc::from(prefix)),
    };
    let all = |table| Change {
        table,
        key: ChangeKey::All,
    };
    let on_key = |table, key: &str| Dependency::Key(table, Arc::from(key));
    let on_prefix = |table, prefix: &str| Dependency::Prefix(table, Arc::from(prefix));
    use Table::*;
    vec![
        // A change to service A never wakes a reader of service B.
        (on_key(ServiceIndex, "web"), key(ServiceIndex, "web"), true),
        (on_key(ServiceIndex, "web"), key(ServiceIndex, "api"), false),
        (
            on_key(ServiceIndex, "web"),
            key(ServiceIndex, "web2"),
            false,
        ),
        // The same key in another table is someone else's business.
        (on_key(Nodes, "web"), key(ServiceIndex, "web"), false),
        (on_key(Kvs, "a"), key(Nodes, "a"), false),
        // KV keys are exact, prefixes are byte prefixes.
        (on_key(Kvs, "a/b"), key(Kvs, "a/b"), true),
        (on_key(Kvs, "a/b"), key(Kvs, "a/bc"), false),
        (on_key(Kvs, "a/b"), key(Kvs, "A/b"), false),
        (on_prefix(Kvs, "web/"), key(Kvs, "web/a/b"), true),
        (on_prefix(Kvs, "web/"), key(Kvs, "webby"), false),
        (on_prefix(Kvs, "web/"), key(Kvs, "web"), false),
        (on_prefix(Kvs, "web/"), key(Kvs, "WEB/a"), false),
        (on_prefix(Kvs, ""), key(Kvs, "anything"), true),
        (on_prefix(Kvs, "é"), key(Kvs, "éa"), true),
        (on_prefix(Kvs, "\u{e9}"), key(Kvs, "e"), false),
        (on_prefix(Kvs, "a"), key(Kvs, "\u{e9}"), false),
        // A recursive delete meets the keys under it and the prefixes overlapping it.
        (on_key(Kvs, "a/b/c"), prefix(Kvs, "a/"), true),
        (on_key(Kvs, "b"), prefix(Kvs, "a/"), false),
        (on_key(Kvs, "a"), prefix(Kvs, "a/"), false),
        (on_prefix(Kvs, "a/b/"), prefix(Kvs, "a/"), true),
        (on_prefix(Kvs, "a"), prefix(Kvs, "a/"), true),
        (on_prefix(Kvs, "b/"), prefix(Kvs, "a/"), false),
        (on_key(Kvs, "x"), prefix(Kvs, ""), true),
        // Whole tables on either side.
        (Dependency::Table(Services), key(Services, "web"), true),
        (Dependency::Table(Services), prefix(Services, "w"), true),
        (Dependency::Table(Services), all(Services), true),
        (Dependency::Table(Services), key(Nodes, "web"), false),
        (on_key(Nodes, "n1"), all(Nodes), true),
        (on_prefix(Kvs, "p/"), all(Kvs), true),
        (on_key(Nodes, "n1"), all(Checks), false),
        // Sessions: IDs exact, a node's sessions under their folded watch key.
        (on_key(Sessions, "node:n1"), key(Sessions, "node:n1"), true),
        (on_key(Sessions, "ab-12"), key(Sessions, "ab-13"), false),
        (on_key(Sessions, "ab-12"), key(Sessions, "AB-12"), false),
        // Catalog names meet in any letter case, on either side.
        (on_key(ServiceIndex, "WEB"), key(ServiceIndex, "web"), true),
        (on_key(ServiceIndex, "web"), key(ServiceIndex, "Web"), true),
        (on_key(Nodes, "Ñode"), key(Nodes, "ñODE"), true),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_and_the_index_agree_on_every_case() {
        for (dependency, change, expected) in agreement_cases() {
            let mut set = Dependencies::new();
            set.add(dependency);
            let filed = &set.as_slice()[0];
            assert_eq!(
                invalidates(&change, filed),
                expected,
                "rule: {filed:?} vs {change:?}"
            );
            let mut index = DependencyIndex::new();
            index.insert(filed, 7u32);
            let mut taken = Vec::new();
            index.take_invalidated(&change, |v| taken.push(v));
            assert_eq!(
                taken == [7],
                expected,
                "index: {filed:?} vs {change:?} took {taken:?}"
            );
            assert_eq!(
                index.indexes_table(filed.table()),
                !expected,
                "a taken value leaves nothing behind, an untaken one stays filed"
            );
        }
    }

    #[test]
    fn catalog_keys_fold_and_kv_keys_do_not() {
        let set = Dependencies::new()
            .key(Table::ServiceIndex, "Web")
            .key(Table::Nodes, "NODE-1")
            .key(Table::Kvs, "Config/A");
        assert_eq!(
            set.as_slice(),
            &[
                Dependency::Key(Table::ServiceIndex, Arc::from("web")),
                Dependency::Key(Table::Nodes, Arc::from("node-1")),
                Dependency::Key(Table::Kvs, Arc::from("Config/A")),
            ]
        );
        // Unicode names fold the way the catalog folds them, not ASCII-only.
        let mut reads = Dependencies::new();
        reads.add_key(Table::ServiceIndex, "ÜBER");
        reads.add_key(Table::ServiceIndex, "über");
        assert_eq!(
            reads.as_slice(),
            &[Dependency::Key(Table::ServiceIndex, Arc::from("über"))]
        );
        assert!(reads.invalidated_by(&Change::key(
            Table::ServiceIndex,
            &Arc::from(&*fold("Über"))
        )));
        // Already canonical keys keep their allocation.
        let shared: Arc<str> = Arc::from("web");
        let set = Dependencies::new().key(Table::ServiceIndex, shared.clone());
        let Dependency::Key(_, filed) = &set.as_slice()[0] else {
            panic!("a key")
        };
        assert!(Arc::ptr_eq(filed, &shared));
        assert!(is_canonical(Table::Kvs, "MiXeD") && !is_canonical(Table::Nodes, "MiXeD"));
        assert!(is_canonical(Table::Nodes, "ñandú"));
    }

    #[test]
    fn sets_drop_repeats_and_coarsen_to_tables() {
        let mut set = Dependencies::new()
            .key(Table::Nodes, "a")
            .key(Table::Nodes, "A")
            .table(Table::Services)
            .table(Table::Services);
        set.add_key(Table::Nodes, "a");
        set.add_table(Table::Services);
        assert_eq!(set.len(), 2);
        assert_eq!(set.coarsened(2), set.as_slice().to_vec());
        assert_eq!(
            set.coarsened(1),
            vec![
                Dependency::Table(Table::Nodes),
                Dependency::Table(Table::Services)
            ]
        );
    }

    #[test]
    fn one_change_takes_every_value_it_invalidates_and_no_other() {
        let mut index = DependencyIndex::new();
        index.insert(&Dependency::Key(Table::Kvs, Arc::from("web/a")), "key");
        index.insert(&Dependency::Prefix(Table::Kvs, Arc::from("web/")), "prefix");
        index.insert(&Dependency::Prefix(Table::Kvs, Arc::from("w")), "short");
        index.insert(&Dependency::Prefix(Table::Kvs, Arc::from("api/")), "other");
        index.insert(&Dependency::Table(Table::Kvs), "whole");
        index.insert(&Dependency::Key(Table::Nodes, Arc::from("web/a")), "node");
        let mut taken = Vec::new();
        index.take_invalidated(&Change::key(Table::Kvs, &Arc::from("web/a")), |v| {
            taken.push(v)
        });
        taken.sort();
        assert_eq!(taken, ["key", "prefix", "short", "whole"]);
        // What was taken is gone; what was not stays.
        taken.clear();
        index.take_invalidated(&Change::key(Table::Kvs, &Arc::from("web/a")), |v| {
            taken.push(v)
        });
        assert!(taken.is_empty());
        assert_eq!(index.retain(|_| true), 2);
        assert_eq!(index.retain(|v| *v != "other"), 1);
        assert!(!index.indexes_table(Table::Kvs));
        assert!(index.indexes_table(Table::Nodes));
        index.clear();
        assert!(!index.indexes_table(Table::Nodes));
    }
}
