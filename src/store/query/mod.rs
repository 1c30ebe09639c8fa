//! The `prepared-queries` table: Consul's prepared queries, their writes and how a lookup
//! finds one.
//!
//! A prepared query names a service query (service, health filter, tags, metadata, `Near`,
//! failover datacenters) under an ID and optionally a name; a template
//! ([`template`]) matches every name that starts with its own. A query may be bound to a
//! session and is then deleted when the session ends (`store::apply` runs that step).
//! [`select`] runs the service part against the catalog (the local half of an execution;
//! sorting, limits and failover belong to the HTTP layer, which alone may wait for other
//! datacenters).
//!
//! Keys: the row key is the ID (exact). Changes: `Key(PreparedQueries, id)` per query
//! written or deleted; the table index moves with each. Lookups by name fold case, as
//! Consul's name index does.
//!
//! Invariants (checked by [`QueryTables::check_invariants`] in tests):
//! - `by_name` maps the lowercased name of every named query, templates included, to its ID,
//!   and nothing else; no two queries share a lowercased name;
//! - at most one template has the empty name;
//! - `by_session[s]` holds exactly the IDs of the queries bound to session `s`, and no
//!   entry of it is empty; every bound session exists when the query is written.

pub mod select;
pub mod template;

use super::{session, Change, Table, Tables};
use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Consul's answer when a lookup names no query.
pub const QUERY_NOT_FOUND: &str = "Query not found";
/// Consul's answer to an empty query ID or name.
pub const MISSING_QUERY_ID: &str = "Missing query ID";

/// `Template`: set when the query is a template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryTemplate {
    /// `Type`: empty for a plain query, else `name_prefix_match`.
    pub kind: String,
    pub regexp: String,
    pub remove_empty_tags: bool,
}

/// One `Failover.Targets` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverTarget {
    /// A cluster peer (refused at write: praetor has no peering).
    pub peer: String,
    pub datacenter: String,
}

/// `Service.Failover`: where to look when this datacenter has no healthy instance.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failover {
    /// The nearest N other datacenters by WAN round trip.
    pub nearest_n: i64,
    /// Then these, in order (`None`: not given, rendered `null`).
    pub datacenters: Option<Vec<String>>,
    /// Instead of both: explicit targets.
    pub targets: Option<Vec<FailoverTarget>>,
}

impl Failover {
    /// `Datacenters` as targets, else `Targets` (Consul's `AsTargets`).
    pub fn as_targets(&self) -> Vec<FailoverTarget> {
        match &self.datacenters {
            Some(dcs) if !dcs.is_empty() => dcs
                .iter()
                .map(|dc| FailoverTarget {
                    peer: String::new(),
                    datacenter: dc.clone(),
                })
                .collect(),
            _ => self.targets.clone().unwrap_or_default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nearest_n == 0
            && self.datacenters.as_ref().is_none_or(Vec::is_empty)
            && self.targets.as_ref().is_none_or(Vec::is_empty)
    }
}

/// `Service`: which instances a query returns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceQuery {
    pub service: String,
    /// Enterprise-only in Consul; refused at write when set.
    pub sameness_group: String,
    pub failover: Failover,
    pub only_passing: bool,
    pub ignore_check_ids: Option<Vec<String>>,
    pub near: String,
    /// Required tags, and `!tag` for forbidden ones (case-insensitive).
    pub tags: Option<Vec<String>>,
    pub node_meta: Option<Vec<(String, String)>>,
    pub service_meta: Option<Vec<(String, String)>>,
    /// Only Connect-capable instances.
    pub connect: bool,
    /// A cluster peer to query (refused at write: praetor has no peering).
    pub peer: String,
}

/// One prepared query, as stored and as Consul renders it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedQuery {
    pub id: String,
    pub name: String,
    /// The session whose end deletes this query; empty for none.
    pub session: String,
    /// The token executions run with; empty for the caller's.
    pub token: String,
    pub template: QueryTemplate,
    pub service: ServiceQuery,
    /// `DNS.TTL`: a Go duration, empty for the agent's service TTL.
    pub dns_ttl: String,
    pub create_index: u64,
    pub modify_index: u64,
}

impl PreparedQuery {
    pub fn is_template(&self) -> bool {
        !self.template.kind.is_empty()
    }

    /// The name a `query` ACL rule is checked against, when one applies (Consul's
    /// `GetACLPrefix`): named queries and templates; anonymous queries have none.
    pub fn acl_prefix(&self) -> Option<&str> {
        (!self.name.is_empty() || self.is_template()).then_some(self.name.as_str())
    }
}

/// A prepared-query write, as carried in a Raft entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueryOp {
    /// Create (`create`: the ID, generated by the proposing server, must be new) or update
    /// a query. The HTTP layer validated the fields; names, sessions and templates are
    /// checked here, against the state the entry applies to.
    Set {
        query: Box<PreparedQuery>,
        create: bool,
    },
    Delete {
        id: String,
    },
}

/// The prepared queries and their name and session indexes. Snapshots hold the rows only;
/// the indexes are rebuilt on restore.
#[derive(Clone, Debug, Default)]
pub struct QueryTables {
    pub by_id: OrdMap<Arc<str>, Arc<PreparedQuery>>,
    /// Lowercased name → ID, for every named query.
    by_name: OrdMap<Arc<str>, Arc<str>>,
    /// Session ID → IDs of the queries bound to it.
    by_session: OrdMap<Arc<str>, OrdSet<Arc<str>>>,
}

impl Serialize for QueryTables {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.by_id.values().map(|q| &**q))
    }
}

impl<'de> Deserialize<'de> for QueryTables {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let rows: Vec<PreparedQuery> = Vec::deserialize(deserializer)?;
        let mut tables = QueryTables::default();
        for row in rows {
            if tables.by_id.contains_key(row.id.as_str()) {
                return Err(serde::de::Error::custom(format!(
                    "snapshot lists prepared query {:?} twice",
                    row.id
                )));
            }
            tables.insert(Arc::new(row));
        }
        Ok(tables)
    }
}

impl QueryTables {
    fn insert(&mut self, query: Arc<PreparedQuery>) {
        let id: Arc<str> = Arc::from(query.id.as_str());
        if !query.name.is_empty() {
            self.by_name
                .insert(Arc::from(query.name.to_lowercase()), id.clone());
        }
        if !query.session.is_empty() {
            self.by_session
                .entry(Arc::from(query.session.as_str()))
                .or_default()
                .insert(id.clone());
        }
        self.by_id.insert(id, query);
    }

    fn remove(&mut self, id: &str) -> Option<Arc<PreparedQuery>> {
        let query = self.by_id.remove(id)?;
        if !query.name.is_empty() {
            let removed = self.by_name.remove(query.name.to_lowercase().as_str());
            debug_assert_eq!(removed.as_deref(), Some(id), "the name index names it");
        }
        if !query.session.is_empty() {
            if let Some(ids) = self.by_session.get_mut(query.session.as_str()) {
                ids.remove(id);
                if ids.is_empty() {
                    self.by_session.remove(query.session.as_str());
                }
            }
        }
        Some(query)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Panics unless the indexes agree with the rows (see the module's invariants).
    pub fn check_invariants(&self) {
        let mut named = 0;
        let mut empty_templates = 0;
        for (id, query) in &self.by_id {
            assert_eq!(**id, *query.id, "rows are keyed by their ID");
            if !query.name.is_empty() {
                named += 1;
                assert_eq!(
                    self.by_name.get(query.name.to_lowercase().as_str()),
                    Some(id),
                    "the name index names {id}"
                );
            } else if query.is_template() {
                empty_templates += 1;
            }
            if !query.session.is_empty() {
                assert!(self
                    .by_session
                    .get(query.session.as_str())
                    .is_some_and(|ids| ids.contains(id)));
            }
        }
        assert_eq!(named, self.by_name.len(), "no stale names");
        assert!(empty_templates <= 1, "one template with the empty name");
        for ids in self.by_session.values() {
            assert!(!ids.is_empty());
            assert!(ids.iter().all(|id| self.by_id.contains_key(id)));
        }
    }
}

/// The index Consul reports for every prepared-query read: the table's.
pub fn queries_index(tables: &Tables) -> u64 {
    tables.table_index(Table::PreparedQueries)
}

/// A query by ID.
pub fn get<'a>(tables: &'a Tables, id: &str) -> Option<&'a Arc<PreparedQuery>> {
    tables.queries.by_id.get(id)
}

/// Every query, by ID.
pub fn list(tables: &Tables) -> impl Iterator<Item = &Arc<PreparedQuery>> {
    tables.queries.by_id.values()
}

/// Finds the query a lookup names (Consul's `PreparedQueryResolve`): by ID if it looks like
/// one, else by exact name (case-insensitive), else the template with the longest name that
/// prefixes it; a template comes back rendered for the name. `Ok(None)`: no query.
pub fn resolve(
    tables: &Tables,
    id_or_name: &str,
    segment: &str,
) -> Result<Option<PreparedQuery>, String> {
    if id_or_name.is_empty() {
        return Err(MISSING_QUERY_ID.to_string());
    }
    let queries = &tables.queries;
    if super::acl::is_uuid(id_or_name) {
        if let Some(query) = queries.by_id.get(id_or_name) {
            if query.is_template() {
                return Err(
                    "prepared query templates can only be resolved up by name, not by ID"
                        .to_string(),
                );
            }
            return Ok(Some((**query).clone()));
        }
    }
    let render = |query: &PreparedQuery| -> Result<Option<PreparedQuery>, String> {
        if !query.is_template() {
            return Ok(Some(query.clone()));
        }
        let compiled = template::compile(query)?;
        compiled
            .render(&template::RenderInput {
                name: id_or_name,
                segment,
            })
            .map(Some)
    };
    let lower = id_or_name.to_lowercase();
    if let Some(id) = queries.by_name.get(lower.as_str()) {
        let query = queries.by_id.get(id).expect("the name index names a row");
        return render(query);
    }
    // Templates by longest prefix: walk the names at or below the lookup in order; a
    // prefix of it sorts at or before it.
    let longest = queries
        .by_name
        .range(..=Arc::<str>::from(lower.as_str()))
        .rev()
        .filter(|(name, _)| lower.starts_with(&***name))
        .map(|(_, id)| queries.by_id.get(id).expect("the name index names a row"))
        .find(|q| q.is_template());
    if let Some(query) = longest {
        return render(query);
    }
    if let Some(query) = queries
        .by_id
        .values()
        .find(|q| q.is_template() && q.name.is_empty())
    {
        return render(query);
    }
    Ok(None)
}

/// Applies a query write; the error is Consul's refusal.
pub fn apply(
    tables: &mut Tables,
    index: u64,
    op: &QueryOp,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    match op {
        QueryOp::Set { query, create } => set(tables, index, query, *create, changes),
        QueryOp::Delete { id } => {
            if !tables.queries.by_id.contains_key(id.as_str()) {
                return Err(format!("Cannot modify non-existent prepared query: '{id}'"));
            }
            delete(tables, index, id, changes);
            Ok(())
        }
    }
}

fn set(
    tables: &mut Tables,
    index: u64,
    query: &PreparedQuery,
    create: bool,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    if query.id.is_empty() {
        return Err(MISSING_QUERY_ID.to_string());
    }
    let existing = tables.queries.by_id.get(query.id.as_str()).cloned();
    match (&existing, create) {
        (Some(_), true) => {
            return Err(format!("prepared query ID {:?} is taken", query.id));
        }
        (None, false) => {
            return Err(format!(
                "Cannot modify non-existent prepared query: '{}'",
                query.id
            ));
        }
        _ => {}
    }
    let lower = query.name.to_lowercase();
    if !query.name.is_empty() {
        if let Some(other) = tables.queries.by_name.get(lower.as_str()) {
            if **other != *query.id {
                return Err(format!(
                    "name '{}' aliases an existing query name",
                    query.name
                ));
            }
        }
    } else if query.is_template() {
        let taken = tables
            .queries
            .by_id
            .values()
            .any(|q| q.is_template() && q.name.is_empty() && q.id != query.id);
        if taken {
            return Err("a query template with an empty name already exists".to_string());
        }
    }
    if super::acl::is_uuid(&query.name) && tables.queries.by_id.contains_key(query.name.as_str()) {
        return Err(format!(
            "name '{}' aliases an existing query ID",
            query.name
        ));
    }
    if !query.session.is_empty() && session::get(tables, &query.session).is_none() {
        return Err(format!("invalid session {:?}", query.session));
    }
    if query.is_template() {
        template::compile(query).map_err(|e| format!("failed compiling template: {e}"))?;
    }
    let mut row = query.clone();
    row.create_index = existing.as_ref().map_or(index, |e| e.create_index);
    row.modify_index = index;
    if existing.is_some() {
        tables.queries.remove(&query.id);
    }
    tables.queries.insert(Arc::new(row));
    tables.bump_table(Table::PreparedQueries, index);
    changes.push(Change::key(
        Table::PreparedQueries,
        &Arc::from(query.id.as_str()),
    ));
    Ok(())
}

fn delete(tables: &mut Tables, index: u64, id: &str, changes: &mut Vec<Change>) {
    let removed = tables.queries.remove(id);
    debug_assert!(removed.is_some(), "deleting a query that exists");
    tables.bump_table(Table::PreparedQueries, index);
    changes.push(Change::key(Table::PreparedQueries, &Arc::from(id)));
}

/// Deletes the queries bound to a session that ended (a step of the apply sequence).
pub fn remove_bound_to_session(
    tables: &mut Tables,
    index: u64,
    session_id: &str,
    changes: &mut Vec<Change>,
) {
    let Some(ids) = tables.queries.by_session.get(session_id).cloned() else {
        return;
    };
    for id in ids {
        delete(tables, index, &id, changes);
    }
    debug_assert!(!tables.queries.by_session.contains_key(session_id));
}

#[cfg(test)]
mod tests {
    use super::super::fixture::Fixture;
    use super::super::session::{Behavior, SessionOp};
    use super::super::{Command, CommandResult, QueryResult};
    use super::*;

    const ID_A: &str = "6b2c8a52-1f3e-4b7a-9c1d-000000000001";
    const ID_B: &str = "6b2c8a52-1f3e-4b7a-9c1d-000000000002";

    fn query(id: &str, name: &str, service: &str) -> PreparedQuery {
        PreparedQuery {
            id: id.into(),
            name: name.into(),
            service: ServiceQuery {
                service: service.into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn set(f: &mut Fixture, query: PreparedQuery, create: bool) -> CommandResult {
        let result = f.run(Command::Query(QueryOp::Set {
            query: Box::new(query),
            create,
        }));
        f.tables.queries.check_invariants();
        result
    }

    fn error(result: CommandResult) -> String {
        match result {
            CommandResult::Query(QueryResult::Refused(e)) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn writes_keep_names_unique_and_indexes_moving() {
        let mut f = Fixture::new();
        assert_eq!(
            set(&mut f, query(ID_A, "Web", "web"), true),
            CommandResult::Query(QueryResult::Written)
        );
        let created_at = f.next_index;
        assert_eq!(queries_index(&f.tables), created_at);
        assert_eq!(
            f.changes,
            [Change::key(Table::PreparedQueries, &Arc::from(ID_A))]
        );
        assert_eq!(
            error(set(&mut f, query(ID_B, "web", "db"), true)),
            "name 'web' aliases an existing query name"
        );
        assert_eq!(
            error(set(&mut f, query(ID_B, ID_A, "db"), true)),
            format!("name '{ID_A}' aliases an existing query ID")
        );
        assert_eq!(
            error(set(&mut f, query(ID_B, "x", "db"), false)),
            format!("Cannot modify non-existent prepared query: '{ID_B}'")
        );
        // An update keeps the create index and may rename.
        assert_eq!(
            set(&mut f, query(ID_A, "www", "web"), false),
            CommandResult::Query(QueryResult::Written)
        );
        let row = get(&f.tables, ID_A).unwrap();
        assert_eq!(
            (row.create_index, row.modify_index),
            (created_at, f.next_index)
        );
        assert!(resolve(&f.tables, "web", "").unwrap().is_none());
        assert_eq!(resolve(&f.tables, "WWW", "").unwrap().unwrap().id, ID_A);
        assert_eq!(resolve(&f.tables, ID_A, "").unwrap().unwrap().name, "www");
        assert_eq!(resolve(&f.tables, "", "").unwrap_err(), MISSING_QUERY_ID);
        f.run(Command::Query(QueryOp::Delete { id: ID_A.into() }));
        assert!(f.tables.queries.is_empty());
        assert_eq!(
            error(f.run(Command::Query(QueryOp::Delete { id: ID_A.into() }))),
            format!("Cannot modify non-existent prepared query: '{ID_A}'")
        );
    }

    #[test]
    fn templates_match_by_longest_prefix_and_render() {
        let mut f = Fixture::new();
        let mut short = query(ID_A, "geo-", "short-${name.suffix}");
        short.template.kind = template::NAME_PREFIX_MATCH.into();
        let mut long = query(ID_B, "geo-db-", "long-${name.suffix}");
        long.template.kind = template::NAME_PREFIX_MATCH.into();
        assert_eq!(
            set(&mut f, short, true),
            CommandResult::Query(QueryResult::Written)
        );
        assert_eq!(
            set(&mut f, long, true),
            CommandResult::Query(QueryResult::Written)
        );
        let resolved = |f: &Fixture, name: &str| {
            resolve(&f.tables, name, "")
                .unwrap()
                .map(|q| q.service.service)
        };
        assert_eq!(resolved(&f, "geo-db-eu").as_deref(), Some("long-eu"));
        assert_eq!(resolved(&f, "geo-web").as_deref(), Some("short-web"));
        assert_eq!(resolved(&f, "other"), None);
        assert!(
            resolve(&f.tables, ID_A, "").is_err(),
            "templates resolve by name only"
        );
        let mut bad = query("6b2c8a52-1f3e-4b7a-9c1d-000000000003", "bad-", "${oops}");
        bad.template.kind = template::NAME_PREFIX_MATCH.into();
        assert!(error(set(&mut f, bad, true)).starts_with("failed compiling template: "));
        // A catch-all template with the empty name matches everything else; only one.
        let mut any = query("6b2c8a52-1f3e-4b7a-9c1d-000000000004", "", "${name.full}");
        any.template.kind = template::NAME_PREFIX_MATCH.into();
        assert_eq!(
            set(&mut f, any.clone(), true),
            CommandResult::Query(QueryResult::Written)
        );
        assert_eq!(resolved(&f, "other").as_deref(), Some("other"));
        any.id = "6b2c8a52-1f3e-4b7a-9c1d-000000000005".into();
        assert_eq!(
            error(set(&mut f, any, true)),
            "a query template with an empty name already exists"
        );
    }

    #[test]
    fn a_query_bound_to_a_session_goes_with_it() {
        let mut f = Fixture::new();
        let mut bound = query(ID_A, "", "web");
        bound.session = "s1".into();
        assert_eq!(
            error(set(&mut f, bound.clone(), true)),
            "invalid session \"s1\""
        );
        f.create("s1", "n1", &[], Behavior::Release);
        assert_eq!(
            set(&mut f, bound, true),
            CommandResult::Query(QueryResult::Written)
        );
        assert_eq!(
            set(&mut f, query(ID_B, "kept", "web"), true),
            CommandResult::Query(QueryResult::Written)
        );
        f.run(Command::Session(SessionOp::Destroy { id: "s1".into() }));
        assert!(get(&f.tables, ID_A).is_none());
        assert!(get(&f.tables, ID_B).is_some());
        assert!(f
            .changes
            .contains(&Change::key(Table::PreparedQueries, &Arc::from(ID_A))));
        f.tables.queries.check_invariants();
    }

    #[test]
    fn the_table_round_trips_through_a_snapshot_with_its_indexes() {
        let mut f = Fixture::new();
        f.create("s1", "n1", &[], Behavior::Release);
        let mut bound = query(ID_A, "Bound", "web");
        bound.session = "s1".into();
        set(&mut f, bound, true);
        set(&mut f, query(ID_B, "", "db"), true);
        let restored = Tables::from_snapshot_bytes(&f.tables.to_snapshot_bytes()).unwrap();
        restored.queries.check_invariants();
        assert_eq!(restored.queries.len(), 2);
        assert_eq!(resolve(&restored, "bound", "").unwrap().unwrap().id, ID_A);
        assert_eq!(queries_index(&restored), queries_index(&f.tables));
    }
}
