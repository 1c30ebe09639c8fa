//! The `kvs` and `tombstones` tables and the KV operations, with Consul's semantics.
//!
//! Tombstones exist so that the index of a prefix query never slides backwards when keys are
//! deleted: a deleted key leaves `(key, delete index)` behind until the leader reaps
//! tombstones older than the reap TTL. A recursive delete leaves a single tombstone on its
//! prefix, as Consul does.
//!
//! Semantics follow Consul's state store: a set preserves the holder session; a set that
//! changes nothing (same value, flags, session and lock index) does not bump `ModifyIndex`;
//! `cas=0` means "only if absent"; a CAS delete of a missing key succeeds.
//!
//! A row's `session` is an opaque holder ID here: acquiring, releasing and what a session's
//! end does to its keys belong to `locks`, which calls the row writes below. The writes that
//! delete rows report the rows they removed, so the caller can tell their holders.

mod entry;
mod rows;

use super::{Change, ChangeKey, Table, Tables};
use bytes::Bytes;
use imbl::OrdMap;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::Bound;
use std::sync::Arc;

pub use entry::{KvEntry, KvFields, VALUE_INLINE_BYTES_MAX};
pub use rows::{KvRow, KvRows, LEAF_BYTES_MAX};

/// Serialized as a map from key to row, as the map of rows the table once was, so the
/// snapshot format did not change when rows were packed into leaves.
impl Serialize for KvRows {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The length goes first: msgpack needs it up front, and an encoder not told it
        // buffers the whole map to count it (a second copy of the table while it writes).
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for row in self.iter() {
            map.serialize_entry(row.key(), &row)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for KvRows {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RowsVisitor;
        impl<'de> serde::de::Visitor<'de> for RowsVisitor {
            type Value = KvRows;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of KV rows by key")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<KvRows, A::Error> {
                // Snapshots list rows in key order, so the table is built leaf by leaf.
                let mut loader = rows::SortedLoader::default();
                while let Some((key, row)) = map.next_entry::<String, KvEntry>()? {
                    if key != row.key() {
                        return Err(serde::de::Error::custom(format!(
                            "KV row {:?} filed under key {key:?}",
                            row.key()
                        )));
                    }
                    loader
                        .push(&row.fields())
                        .map_err(serde::de::Error::custom)?;
                }
                Ok(loader.finish())
            }
        }
        deserializer.deserialize_map(RowsVisitor)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KvTables {
    pub entries: KvRows,
    /// Deleted key (or recursively deleted prefix) → index of the delete.
    pub tombstones: OrdMap<Arc<str>, u64>,
}

/// A KV write, as carried in a Raft entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvOp {
    Set {
        key: String,
        value: Bytes,
        flags: u64,
    },
    /// Set only if the key's `ModifyIndex` equals `modify_index` (0: only if absent).
    Cas {
        key: String,
        value: Bytes,
        flags: u64,
        modify_index: u64,
    },
    Delete {
        key: String,
    },
    DeleteCas {
        key: String,
        modify_index: u64,
    },
    DeleteTree {
        prefix: String,
    },
    /// Drop tombstones whose delete index is ≤ `up_to_index`.
    ReapTombstones {
        up_to_index: u64,
    },
    /// `?acquire=<session>`: take the lock for `session`, writing value and flags.
    Lock {
        key: String,
        value: Bytes,
        flags: u64,
        session: String,
    },
    /// `?release=<session>`: give the lock up, writing value and flags.
    Unlock {
        key: String,
        value: Bytes,
        flags: u64,
        session: String,
    },
}

/// Writes `key`, keeping its holder (Consul's set).
pub(super) fn set(
    tables: &mut Tables,
    index: u64,
    key: &str,
    value: &[u8],
    flags: u64,
    changes: &mut Vec<Change>,
) {
    let existing = tables.kv.entries.get(key).map(KvRow::fields);
    if let Some(e) = existing {
        // Consul skips the write entirely when nothing would change, so the key keeps its
        // ModifyIndex and blocking queries on it stay parked.
        if e.value == value && e.flags == flags && e.lock_index == 0 {
            return;
        }
    }
    // The holder is kept; it is copied out of the row the write replaces.
    let (create_index, session) = match existing {
        Some(e) => (e.create_index, e.session.map(str::to_string)),
        None => (index, None),
    };
    tables.kv.entries.insert(KvFields {
        key,
        value,
        flags,
        session: session.as_deref(),
        lock_index: 0,
        create_index,
        modify_index: index,
    });
    tables.bump_table(Table::Kvs, index);
    changes.push(Change::key(Table::Kvs, &Arc::from(key)));
}

/// Sets `key` only if its `ModifyIndex` equals `modify_index` (0: only if absent). Returns
/// whether it did.
pub(super) fn cas(
    tables: &mut Tables,
    index: u64,
    key: &str,
    value: &[u8],
    flags: u64,
    modify_index: u64,
    changes: &mut Vec<Change>,
) -> bool {
    let existing = tables.kv.entries.get(key).map(KvRow::modify_index);
    let allowed = match (existing, modify_index) {
        (None, 0) => true,
        (Some(current), wanted) => wanted != 0 && current == wanted,
        (None, _) => false,
    };
    if allowed {
        set(tables, index, key, value, flags, changes);
    }
    allowed
}

/// Deletes one key, leaving a tombstone; the removed row goes to `removed`.
pub(super) fn delete(
    tables: &mut Tables,
    index: u64,
    key: &str,
    removed: &mut Vec<KvEntry>,
    changes: &mut Vec<Change>,
) {
    if let Some(old) = tables.kv.entries.remove(key) {
        let key: Arc<str> = Arc::from(key);
        tables.kv.tombstones.insert(key.clone(), index);
        tables.bump_table(Table::Tombstones, index);
        tables.bump_table(Table::Kvs, index);
        changes.push(Change::key(Table::Kvs, &key));
        removed.push(old);
    }
}

/// Deletes `key` only if its `ModifyIndex` equals `modify_index`; a missing key counts as
/// deleted. Returns whether the delete succeeded.
pub(super) fn delete_cas(
    tables: &mut Tables,
    index: u64,
    key: &str,
    modify_index: u64,
    removed: &mut Vec<KvEntry>,
    changes: &mut Vec<Change>,
) -> bool {
    match tables.kv.entries.get(key).map(KvRow::modify_index) {
        None => true,
        Some(current) if current == modify_index => {
            delete(tables, index, key, removed, changes);
            true
        }
        Some(_) => false,
    }
}

/// Deletes every key under `prefix`, leaving one tombstone on the prefix (none for the empty
/// prefix); the removed rows go to `removed`.
pub(super) fn delete_tree(
    tables: &mut Tables,
    index: u64,
    prefix: &str,
    removed: &mut Vec<KvEntry>,
    changes: &mut Vec<Change>,
) {
    let doomed: Vec<String> = tables
        .kv
        .entries
        .prefix(prefix)
        .map(|row| row.key().to_string())
        .collect();
    if doomed.is_empty() {
        return;
    }
    for key in doomed {
        let gone = tables.kv.entries.remove(&key);
        debug_assert!(gone.is_some(), "a listed row is in the table");
        removed.extend(gone);
    }
    if !prefix.is_empty() {
        tables.kv.tombstones.insert(Arc::from(prefix), index);
        tables.bump_table(Table::Tombstones, index);
    }
    tables.bump_table(Table::Kvs, index);
    changes.push(Change {
        table: Table::Kvs,
        key: ChangeKey::Prefix(Arc::from(prefix)),
    });
}

/// Drops tombstones whose delete index is ≤ `up_to_index`. Reaping changes no visible row,
/// so it pushes no change and wakes no watcher; only the tombstones index moves.
pub(super) fn reap_tombstones(tables: &mut Tables, index: u64, up_to_index: u64) {
    let reaped: Vec<Arc<str>> = tables
        .kv
        .tombstones
        .iter()
        .filter(|(_, deleted_at)| **deleted_at <= up_to_index)
        .map(|(key, _)| key.clone())
        .collect();
    for key in &reaped {
        tables.kv.tombstones.remove(key);
    }
    if !reaped.is_empty() {
        tables.bump_table(Table::Tombstones, index);
    }
}

/// Writes `key` as Consul's `kvsSetTxn` with `updateSession = true` does: `session` replaces
/// the holder, `lock_index` is given, and an entry equal to the stored one writes nothing.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_locked(
    tables: &mut Tables,
    index: u64,
    key: &str,
    value: &[u8],
    flags: u64,
    session: Option<&str>,
    lock_index: u64,
    changes: &mut Vec<Change>,
) {
    let existing = tables.kv.entries.get(key).map(KvRow::fields);
    if let Some(e) = existing {
        if e.value == value
            && e.flags == flags
            && e.lock_index == lock_index
            && e.session == session
        {
            return;
        }
    }
    let create_index = existing.map_or(index, |e| e.create_index);
    tables.kv.entries.insert(KvFields {
        key,
        value,
        flags,
        session,
        lock_index,
        create_index,
        modify_index: index,
    });
    tables.bump_table(Table::Kvs, index);
    changes.push(Change::key(Table::Kvs, &Arc::from(key)));
}

/// Clears the holder of `key`, keeping value, flags and `LockIndex` (a session's release
/// behavior when it ends).
pub(super) fn clear_holder(tables: &mut Tables, index: u64, key: &str, changes: &mut Vec<Change>) {
    let Some(existing) = tables.kv.entries.get(key).map(KvRow::to_entry) else {
        return;
    };
    let e = existing.fields();
    write_locked(
        tables,
        index,
        key,
        e.value,
        e.flags,
        None,
        e.lock_index,
        changes,
    );
}

/// Iterates over the entries of `map` whose key starts with `prefix`, in key order.
pub fn prefix_range<'m, 'p, V>(
    map: &'m OrdMap<Arc<str>, V>,
    prefix: &'p str,
) -> impl Iterator<Item = (&'m Arc<str>, &'m V)> + use<'m, 'p, V>
where
    V: Clone,
{
    map.range::<_, str>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(move |(k, _)| k.starts_with(prefix))
}

/// The index Consul reports for KV queries that have no better one.
pub fn kv_table_index(tables: &Tables) -> u64 {
    tables.max_table_index(&[Table::Kvs, Table::Tombstones])
}

/// Highest delete index of tombstones under `prefix`.
fn graveyard_max_index(tables: &Tables, prefix: &str) -> u64 {
    prefix_range(&tables.kv.tombstones, prefix)
        .map(|(_, idx)| *idx)
        .max()
        .unwrap_or(0)
}

/// A single key. The index is the key's `ModifyIndex`, or the table index when it is missing.
pub fn get<'a>(tables: &'a Tables, key: &str) -> (u64, Option<KvRow<'a>>) {
    match tables.kv.entries.get(key) {
        Some(entry) => (entry.modify_index(), Some(entry)),
        None => (kv_table_index(tables), None),
    }
}

/// Index of a prefix query: the highest `ModifyIndex` among the entries and tombstones under
/// the prefix, falling back to the table index when there are none (or the prefix is empty).
fn prefix_query_index(tables: &Tables, prefix: &str, entries_max: u64) -> u64 {
    let local = if prefix.is_empty() {
        kv_table_index(tables)
    } else {
        entries_max.max(graveyard_max_index(tables, prefix))
    };
    if local != 0 {
        local
    } else {
        kv_table_index(tables)
    }
}

/// Every entry under `prefix` (`?recurse`).
pub fn list<'a>(tables: &'a Tables, prefix: &str) -> (u64, Vec<KvRow<'a>>) {
    let entries: Vec<KvRow<'a>> = tables.kv.entries.prefix(prefix).collect();
    let entries_max = entries.iter().map(|e| e.modify_index()).max().unwrap_or(0);
    (prefix_query_index(tables, prefix, entries_max), entries)
}

/// Keys under `prefix` (`?keys`), folded at the first `separator` after the prefix.
pub fn keys<'a>(tables: &'a Tables, prefix: &str, separator: &str) -> (u64, Vec<&'a str>) {
    let mut out: Vec<&'a str> = Vec::new();
    let mut entries_max = 0;
    for entry in tables.kv.entries.prefix(prefix) {
        let fields = entry.fields();
        entries_max = entries_max.max(fields.modify_index);
        let key: &'a str = fields.key;
        if separator.is_empty() {
            out.push(key);
            continue;
        }
        let after = &key[prefix.len()..];
        match after.find(separator) {
            Some(at) => {
                let folded = &key[..prefix.len() + at + separator.len()];
                if out.last() != Some(&folded) {
                    out.push(folded);
                }
            }
            None => out.push(key),
        }
    }
    (prefix_query_index(tables, prefix, entries_max), out)
}

#[cfg(test)]
mod tests {
    use super::super::{Command, CommandResult, KvResult};
    use super::*;

    struct Fixture {
        tables: Tables,
        next_index: u64,
        changes: Vec<Change>,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture {
                tables: Tables::default(),
                next_index: 10,
                changes: Vec::new(),
            }
        }
        fn run(&mut self, op: KvOp) -> CommandResult {
            self.next_index += 1;
            self.changes.clear();
            self.tables
                .apply(self.next_index, &Command::Kv(op), &mut self.changes)
        }
        fn set(&mut self, key: &str, value: &str) -> CommandResult {
            self.run(KvOp::Set {
                key: key.into(),
                value: Bytes::copy_from_slice(value.as_bytes()),
                flags: 0,
            })
        }
    }

    #[test]
    fn set_then_get_tracks_indexes() {
        let mut f = Fixture::new();
        assert_eq!(f.set("a", "1"), CommandResult::Kv(KvResult::Written));
        let (index, entry) = get(&f.tables, "a");
        let entry = entry.unwrap();
        assert_eq!(
            (index, entry.create_index(), entry.modify_index()),
            (11, 11, 11)
        );
        assert_eq!(f.changes, vec![Change::key(Table::Kvs, &Arc::from("a"))]);
        f.set("a", "2");
        let (index, entry) = get(&f.tables, "a");
        assert_eq!((index, entry.unwrap().create_index()), (12, 11));
        // A set that changes nothing keeps the ModifyIndex and reports no change.
        f.set("a", "2");
        assert_eq!(get(&f.tables, "a").0, 12);
        assert!(f.changes.is_empty());
        assert_eq!(f.tables.index, 13);
    }

    #[test]
    fn missing_key_reports_table_index() {
        let mut f = Fixture::new();
        f.set("x", "1");
        f.set("y", "1");
        let (index, entry) = get(&f.tables, "nope");
        assert!(entry.is_none());
        assert_eq!(index, 12);
    }

    #[test]
    fn cas_semantics() {
        let mut f = Fixture::new();
        let cas = |key: &str, modify_index| KvOp::Cas {
            key: key.into(),
            value: Bytes::from_static(b"v"),
            flags: 1,
            modify_index,
        };
        assert_eq!(
            f.run(cas("k", 5)),
            CommandResult::Kv(KvResult::CheckAndSetFailed),
            "cas≠0 on a missing key fails"
        );
        assert_eq!(
            f.run(cas("k", 0)),
            CommandResult::Kv(KvResult::Written),
            "cas=0 creates"
        );
        assert_eq!(
            f.run(cas("k", 0)),
            CommandResult::Kv(KvResult::CheckAndSetFailed),
            "cas=0 on an existing key fails"
        );
        let current = get(&f.tables, "k").0;
        assert_eq!(
            f.run(cas("k", current + 100)),
            CommandResult::Kv(KvResult::CheckAndSetFailed)
        );
        assert!(f.changes.is_empty());
        assert_eq!(
            f.run(cas("k", current)),
            CommandResult::Kv(KvResult::Written)
        );
    }

    #[test]
    fn delete_leaves_tombstone_and_prefix_index_does_not_slide_back() {
        let mut f = Fixture::new();
        f.set("p/a", "1");
        f.set("p/b", "1");
        f.set("q", "1");
        assert_eq!(list(&f.tables, "p/").0, 12);
        f.run(KvOp::Delete { key: "p/b".into() });
        let (index, entries) = list(&f.tables, "p/");
        assert_eq!(entries.len(), 1);
        assert_eq!(
            index, 14,
            "the tombstone's index keeps the prefix index from going back"
        );
        assert_eq!(f.tables.table_index(Table::Tombstones), 14);
        f.run(KvOp::ReapTombstones { up_to_index: 14 });
        assert_eq!(list(&f.tables, "p/").0, 11);
    }

    #[test]
    fn delete_cas_semantics() {
        let mut f = Fixture::new();
        assert_eq!(
            f.run(KvOp::DeleteCas {
                key: "gone".into(),
                modify_index: 3
            }),
            CommandResult::Kv(KvResult::Written)
        );
        f.set("k", "v");
        let current = get(&f.tables, "k").0;
        assert_eq!(
            f.run(KvOp::DeleteCas {
                key: "k".into(),
                modify_index: current + 1
            }),
            CommandResult::Kv(KvResult::CheckAndSetFailed)
        );
        assert!(get(&f.tables, "k").1.is_some());
        assert_eq!(
            f.run(KvOp::DeleteCas {
                key: "k".into(),
                modify_index: current
            }),
            CommandResult::Kv(KvResult::Written)
        );
        assert!(get(&f.tables, "k").1.is_none());
    }

    #[test]
    fn delete_tree_removes_prefix_only() {
        let mut f = Fixture::new();
        for k in ["a/1", "a/2", "ab", "b"] {
            f.set(k, "v");
        }
        f.run(KvOp::DeleteTree {
            prefix: "a/".into(),
        });
        assert_eq!(
            f.changes,
            vec![Change {
                table: Table::Kvs,
                key: ChangeKey::Prefix(Arc::from("a/"))
            }]
        );
        let (_, remaining) = keys(&f.tables, "", "");
        assert_eq!(remaining, vec!["ab", "b"]);
        assert_eq!(f.tables.kv.tombstones.get("a/"), Some(&15));
        f.run(KvOp::DeleteTree { prefix: "".into() });
        assert!(f.tables.kv.entries.is_empty());
    }

    #[test]
    fn keys_fold_at_separator() {
        let mut f = Fixture::new();
        for k in ["web/a/x", "web/a/y", "web/b", "web/c/z", "other"] {
            f.set(k, "v");
        }
        let (_, folded) = keys(&f.tables, "web/", "/");
        assert_eq!(folded, vec!["web/a/", "web/b", "web/c/"]);
        let (_, all) = keys(&f.tables, "web/", "");
        assert_eq!(all.len(), 4);
        let (_, empty) = keys(&f.tables, "zzz", "/");
        assert!(empty.is_empty());
    }
}
