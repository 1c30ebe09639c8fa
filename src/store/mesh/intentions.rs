//! Intentions: the typed body of a `service-intentions` config entry, Consul's precedence
//! and validation, the legacy ID-based writes of `/v1/connect/intentions`, and
//! [`decide`], the authorization of one connection.
//!
//! As in Consul ≥ 1.9 every intention is one source of the `service-intentions` entry of its
//! destination. An entry written through `/v1/config` carries no legacy IDs; one built by the
//! legacy API (`POST /v1/connect/intentions`) carries an ID, create and update times and
//! metadata on every source, and the legacy API refuses to edit a destination whose entry
//! has a source without an ID, as Consul does.
//!
//! Precedence (Consul's `computeIntentionPrecedence`, namespaces always `default` here):
//! exact destination + exact source 9, exact destination + `*` source 8, `*` destination +
//! exact source 6, `*` + `*` 5. [`decide`] reads at most the two entries that can match a
//! destination and scans their sources in precedence order, so one decision costs two map
//! lookups and a scan of the matching entries' sources: no allocation, no clock.

use super::config_entry::{self, ConfigEntry, ConfigKind, EntryBody};
use crate::store::{Change, CommandResult, Tables};
use arcstr::ArcStr;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The wildcard name.
pub const WILDCARD: &str = "*";

/// Consul's limits on opaque values (`metaMaxKeyPairs`, `metaKeyMaxLength`,
/// `metaValueMaxLength`).
pub const META_PAIRS_MAX: usize = 64;
pub const META_KEY_BYTES_MAX: usize = 128;
pub const META_VALUE_BYTES_MAX: usize = 512;

/// Most sources one `service-intentions` entry may hold (a bound on the scan an
/// authorization makes; Consul bounds it only by the request size).
pub const SOURCES_PER_ENTRY_MAX: usize = 4096;

/// An L4 decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    Allow,
    Deny,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
    pub fn parse(text: &str) -> Option<Action> {
        match text {
            "allow" => Some(Action::Allow),
            "deny" => Some(Action::Deny),
            _ => None,
        }
    }
}

/// One source of a `service-intentions` entry (Consul's `SourceIntention`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceIntention {
    pub name: ArcStr,
    /// `None` when the source has L7 `Permissions` instead.
    pub action: Option<Action>,
    /// `Permissions` as a compact JSON array (validated and canonical); empty when none.
    pub permissions_json: ArcStr,
    pub precedence: u32,
    /// The legacy API's ID; empty for entries written as config entries.
    pub legacy_id: ArcStr,
    /// `Type`: `consul` is the only one.
    pub source_type: ArcStr,
    pub description: ArcStr,
    /// The legacy API's `Meta`; `None` outside legacy entries.
    pub legacy_meta: Option<Vec<(String, String)>>,
    /// The legacy API's `CreatedAt` and `UpdatedAt`, Unix nanoseconds.
    pub legacy_create_time_ns: Option<i64>,
    pub legacy_update_time_ns: Option<i64>,
    pub peer: ArcStr,
    pub sameness_group: ArcStr,
}

impl SourceIntention {
    /// Whether the source has L7 permissions (and so no L4 action).
    pub fn is_l7(&self) -> bool {
        !self.permissions_json.is_empty()
    }
}

/// The body of a `service-intentions` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceIntentions {
    /// Sorted by precedence, highest first; equal precedence keeps the written order.
    pub sources: Vec<SourceIntention>,
    /// `JWT` as a compact JSON object; empty when none.
    pub jwt_json: ArcStr,
    pub meta: Vec<(String, String)>,
}

/// Consul's precedence of a source intention under destination `destination`.
pub fn precedence(destination: &str, source: &str) -> u32 {
    let exact = |name: &str| if name == WILDCARD { 1 } else { 2 };
    let max = match exact(destination) {
        2 => 9,
        _ => 6,
    };
    max - (2 - exact(source))
}

/// Consul's `normalize`: default source type, precedence, legacy fields cleared outside
/// legacy writes (legacy meta forced non-nil in them), methods uppercased by the decoder,
/// sources sorted by precedence (stable).
pub fn normalize(destination: &str, body: &mut ServiceIntentions, legacy_write: bool) {
    for source in &mut body.sources {
        if source.source_type.is_empty() {
            source.source_type = ArcStr::from("consul");
        }
        source.precedence = precedence(destination, &source.name);
        if legacy_write {
            source.legacy_meta.get_or_insert_with(Vec::new);
        } else {
            source.legacy_id = ArcStr::new();
            source.legacy_create_time_ns = None;
            source.legacy_update_time_ns = None;
        }
    }
    body.sources
        .sort_by_key(|source| std::cmp::Reverse(source.precedence));
}

fn wildcard_error(name: &str) -> Option<&'static str> {
    (name != WILDCARD && name.contains('*'))
        .then_some("Name: wildcard character '*' cannot be used with partial values")
}

fn meta_error(meta: &[(String, String)], prefix: &str) -> Result<(), String> {
    if meta.len() > META_PAIRS_MAX {
        return Err(format!(
            "{prefix}Meta exceeds maximum element count {META_PAIRS_MAX}"
        ));
    }
    for (k, v) in meta {
        if k.len() > META_KEY_BYTES_MAX {
            return Err(format!(
                "{prefix}Meta key {k:?} exceeds maximum length {META_KEY_BYTES_MAX}"
            ));
        }
        if v.len() > META_VALUE_BYTES_MAX {
            return Err(format!(
                "{prefix}Meta value for key {k:?} exceeds maximum length {META_VALUE_BYTES_MAX}"
            ));
        }
    }
    Ok(())
}

/// Consul's `validate` of a `service-intentions` entry, in its order and words; L7
/// permissions were checked field by field when they were decoded.
pub fn validate(
    destination: &str,
    body: &ServiceIntentions,
    legacy_write: bool,
) -> Result<(), String> {
    if destination.is_empty() {
        return Err("Name is required".to_string());
    }
    if let Some(message) = wildcard_error(destination) {
        return Err(message.to_string());
    }
    let destination_wild = destination == WILDCARD;
    if legacy_write {
        if !body.meta.is_empty() {
            return Err("Meta must be omitted for legacy intention writes".to_string());
        }
    } else {
        meta_error(&body.meta, "")?;
    }
    if body.sources.is_empty() {
        return Err("At least one source is required".to_string());
    }
    if body.sources.len() > SOURCES_PER_ENTRY_MAX {
        return Err(format!(
            "a service-intentions entry holds at most {SOURCES_PER_ENTRY_MAX} sources"
        ));
    }
    let mut seen: Vec<(&str, &str, &str)> = Vec::with_capacity(body.sources.len());
    for (i, src) in body.sources.iter().enumerate() {
        validate_source(i, src, legacy_write, destination_wild)?;
        let qualified = (
            src.name.as_str(),
            src.peer.as_str(),
            src.sameness_group.as_str(),
        );
        if seen.contains(&qualified) {
            return Err(duplicate_source_error(i, src));
        }
        seen.push(qualified);
    }
    Ok(())
}

/// One source of a `service-intentions` entry on its own: names, peer and sameness group,
/// the legacy fields (required on legacy writes, refused otherwise), then action and type.
fn validate_source(
    i: usize,
    src: &SourceIntention,
    legacy_write: bool,
    destination_wild: bool,
) -> Result<(), String> {
    if src.name.is_empty() {
        return Err(format!("Sources[{i}].Name is required"));
    }
    if let Some(message) = wildcard_error(&src.name) {
        return Err(format!("Sources[{i}].{message}"));
    }
    if src.peer.contains('*') {
        return Err(format!(
            "Sources[{i}].Peer: cannot use wildcard '*' in peer"
        ));
    }
    if src.sameness_group.contains('*') {
        return Err(format!(
            "Sources[{i}].SamenessGroup: cannot use wildcard '*' in sameness group"
        ));
    }
    if !src.sameness_group.is_empty() && !src.peer.is_empty() {
        return Err(format!(
            "Sources[{i}].SamenessGroup: cannot set SamenessGroup and Peer at the same time"
        ));
    }
    if src.description.len() > META_VALUE_BYTES_MAX {
        return Err(format!(
            "Sources[{i}].Description exceeds maximum length {META_VALUE_BYTES_MAX}"
        ));
    }
    if legacy_write {
        validate_legacy_source_fields(i, src)?;
    } else {
        refuse_legacy_source_fields(i, src)?;
    }
    if (legacy_write || !src.is_l7()) && src.action.is_none() {
        return Err(format!(
            "Sources[{i}].Action must be set to 'allow' or 'deny'"
        ));
    }
    if src.is_l7() && src.action.is_some() {
        return Err(format!(
            "Sources[{i}].Action must be omitted if Permissions are specified"
        ));
    }
    if destination_wild && src.is_l7() {
        return Err(format!(
            "Sources[{i}].Permissions cannot be specified on intentions with wildcarded destinations"
        ));
    }
    if src.source_type != "consul" {
        return Err(format!("Sources[{i}].Type must be set to 'consul'"));
    }
    Ok(())
}

/// A legacy write carries a local source with its legacy ID, times and meta.
fn validate_legacy_source_fields(i: usize, src: &SourceIntention) -> Result<(), String> {
    if !src.peer.is_empty() {
        return Err(format!(
            "Sources[{i}].Peer cannot be set by legacy intentions"
        ));
    }
    if !src.sameness_group.is_empty() {
        return Err(format!(
            "Sources[{i}].SamenessGroup cannot be set by legacy intentions"
        ));
    }
    meta_error(
        src.legacy_meta.as_deref().unwrap_or_default(),
        &format!("Sources[{i}]."),
    )?;
    if src.legacy_create_time_ns.is_none() {
        return Err(format!("Sources[{i}].LegacyCreateTime must be set"));
    }
    if src.legacy_update_time_ns.is_none() {
        return Err(format!("Sources[{i}].LegacyUpdateTime must be set"));
    }
    if src.legacy_id.is_empty() {
        return Err(format!("Sources[{i}].LegacyID must be set"));
    }
    Ok(())
}

/// A config-entry write leaves the legacy fields to the legacy API.
fn refuse_legacy_source_fields(i: usize, src: &SourceIntention) -> Result<(), String> {
    if src.legacy_meta.as_ref().is_some_and(|m| !m.is_empty()) {
        return Err(format!("Sources[{i}].LegacyMeta must be omitted"));
    }
    if src.legacy_create_time_ns.is_some() {
        return Err(format!("Sources[{i}].LegacyCreateTime must be omitted"));
    }
    if src.legacy_update_time_ns.is_some() {
        return Err(format!("Sources[{i}].LegacyUpdateTime must be omitted"));
    }
    if !src.legacy_id.is_empty() {
        return Err(format!("Sources[{i}].LegacyID must be omitted"));
    }
    Ok(())
}

/// Consul's words for a source named twice, qualified by its peer or sameness group.
fn duplicate_source_error(i: usize, src: &SourceIntention) -> String {
    if !src.peer.is_empty() {
        format!(
            "Sources[{i}] defines peer({:?}) {:?} more than once",
            src.peer.as_str(),
            src.name.as_str()
        )
    } else if !src.sameness_group.is_empty() {
        format!(
            "Sources[{i}] defines sameness-group({:?}) {:?} more than once",
            src.sameness_group.as_str(),
            src.name.as_str()
        )
    } else {
        format!(
            "Sources[{i}] defines {:?} more than once",
            src.name.as_str()
        )
    }
}

/// What authorized (or refused) a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision<'t> {
    /// A source intention matched: the destination it is filed under and the source.
    Matched {
        destination: &'t str,
        source: &'t SourceIntention,
    },
    /// Nothing matched: the default (the ACL default policy) decides.
    Default,
}

impl Decision<'_> {
    /// Whether the connection is allowed, `default_allow` deciding when nothing matched. An
    /// L7 intention refuses an L4 connection, as Consul's authorize does.
    pub fn allowed(&self, default_allow: bool) -> bool {
        match self {
            Decision::Matched { source, .. } => source.action == Some(Action::Allow),
            Decision::Default => default_allow,
        }
    }
}

fn source_matches(intention: &SourceIntention, source: &str) -> bool {
    // Peered and sameness-group sources name services elsewhere: never a local caller.
    intention.peer.is_empty()
        && intention.sameness_group.is_empty()
        && (intention.name == WILDCARD || intention.name.eq_ignore_ascii_case(source))
}

/// The intention deciding a connection from `source` to `destination` in `tables`: the
/// highest-precedence source intention of the destination's entry or the wildcard entry.
pub fn decide<'t>(tables: &'t Tables, source: &str, destination: &str) -> Decision<'t> {
    let exact = config_entry::get(tables, ConfigKind::ServiceIntentions, destination);
    let wildcard = config_entry::get(tables, ConfigKind::ServiceIntentions, WILDCARD);
    // Precedence order: exact destination's sources (9 then 8), then the wildcard's (6, 5).
    for entry in [exact, wildcard].into_iter().flatten() {
        let Some(body) = entry.intentions() else {
            debug_assert!(false, "service-intentions entries are typed");
            continue;
        };
        debug_assert!(
            body.sources
                .windows(2)
                .all(|w| w[0].precedence >= w[1].precedence),
            "sources are kept in precedence order"
        );
        if let Some(found) = body.sources.iter().find(|s| source_matches(s, source)) {
            return Decision::Matched {
                destination: &entry.name,
                source: found,
            };
        }
    }
    Decision::Default
}

/// Every intention that could apply to `name` as a destination (`by_destination`) or as a
/// source: `(destination, source)` pairs, highest precedence first (Consul's
/// `IntentionMatch`, ties broken by source then destination name).
pub fn matches<'t>(
    tables: &'t Tables,
    name: &str,
    by_destination: bool,
) -> Vec<(&'t ConfigEntry, &'t SourceIntention)> {
    let mut found: Vec<(&ConfigEntry, &SourceIntention)> = Vec::new();
    if by_destination {
        for destination in [name, WILDCARD] {
            if let Some(entry) =
                config_entry::get(tables, ConfigKind::ServiceIntentions, destination)
            {
                for source in entry
                    .intentions()
                    .map(|b| &b.sources[..])
                    .unwrap_or_default()
                {
                    found.push((entry, source));
                }
            }
            if name == WILDCARD {
                break;
            }
        }
    } else {
        for entry in config_entry::list(tables, ConfigKind::ServiceIntentions) {
            for source in entry
                .intentions()
                .map(|b| &b.sources[..])
                .unwrap_or_default()
            {
                if source.name == WILDCARD || source.name.eq_ignore_ascii_case(name) {
                    found.push((entry, source));
                }
            }
        }
    }
    found.sort_by(|(da, sa), (db, sb)| {
        sb.precedence
            .cmp(&sa.precedence)
            .then_with(|| sa.name.cmp(&sb.name))
            .then_with(|| da.name.cmp(&db.name))
    });
    found
}

/// Every intention, as `(destination entry, source)`, in destination then precedence order.
pub fn all(tables: &Tables) -> impl Iterator<Item = (&ConfigEntry, &SourceIntention)> {
    config_entry::list(tables, ConfigKind::ServiceIntentions).flat_map(|entry| {
        entry
            .intentions()
            .map(|b| &b.sources[..])
            .unwrap_or_default()
            .iter()
            .map(move |source| (&**entry, source))
    })
}

/// The intention with legacy ID `id`: its entry and source.
pub fn by_legacy_id<'t>(
    tables: &'t Tables,
    id: &str,
) -> Option<(&'t ConfigEntry, &'t SourceIntention)> {
    all(tables).find(|(_, source)| !source.legacy_id.is_empty() && source.legacy_id == id)
}

/// The intention from `source` to `destination` exactly.
pub fn exact<'t>(
    tables: &'t Tables,
    source: &str,
    destination: &str,
) -> Option<(&'t Arc<ConfigEntry>, &'t SourceIntention)> {
    let entry = config_entry::get(tables, ConfigKind::ServiceIntentions, destination)?;
    let found = entry
        .intentions()?
        .sources
        .iter()
        .find(|s| s.peer.is_empty() && s.sameness_group.is_empty() && s.name == source)?;
    Some((entry, found))
}

/// A write of the intentions API on one source of a destination's entry (Consul's
/// `IntentionMutation`). The proposer made the ID and stamped the times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum IntentionOp {
    /// `POST /v1/connect/intentions`: a new source with a legacy ID.
    LegacyCreate {
        destination: String,
        source: SourceIntention,
    },
    /// `PUT /v1/connect/intentions/<id>`: replaces the source with that ID.
    LegacyUpdate {
        id: String,
        destination: String,
        source: SourceIntention,
    },
    /// `DELETE /v1/connect/intentions/<id>`.
    LegacyDelete { id: String },
    /// `PUT /v1/connect/intentions/exact`: upserts the source by name.
    Upsert {
        destination: String,
        source: SourceIntention,
    },
    /// `DELETE /v1/connect/intentions/exact`.
    DeleteExact { destination: String, source: String },
}

/// Consul's refusal to let the legacy API edit an entry written as a config entry.
fn legacy_allowed(entry: &ConfigEntry) -> Result<(), String> {
    let all_legacy = entry
        .intentions()
        .is_some_and(|b| b.sources.iter().all(|s| !s.legacy_id.is_empty()));
    if all_legacy {
        return Ok(());
    }
    Err(format!(
        "cannot use legacy intention API to edit intentions with a destination that was edited via a config entry: {}",
        entry.name
    ))
}

fn intentions_entry(destination: &str, body: ServiceIntentions) -> ConfigEntry {
    ConfigEntry {
        kind: ConfigKind::ServiceIntentions,
        name: ArcStr::from(destination),
        body: EntryBody::Intentions(Arc::new(body)),
        protocol: ArcStr::new(),
        create_index: 0,
        modify_index: 0,
    }
}

/// Writes `body` as `destination`'s entry (deleting the entry when no source is left),
/// after Consul's normalization and validation.
fn write_back(
    tables: &mut Tables,
    index: u64,
    destination: &str,
    mut body: ServiceIntentions,
    legacy_write: bool,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    if body.sources.is_empty() {
        let key = config_entry::entry_key(ConfigKind::ServiceIntentions, destination);
        config_entry::remove(tables, &key, changes)?;
        return Ok(());
    }
    normalize(destination, &mut body, legacy_write);
    validate(destination, &body, legacy_write)?;
    config_entry::install(tables, index, &intentions_entry(destination, body), changes)
}

/// Applies one intentions API write; the answer is `Bool(true)` or Consul's error.
pub(crate) fn apply(
    tables: &mut Tables,
    index: u64,
    op: &IntentionOp,
    changes: &mut Vec<Change>,
) -> CommandResult {
    let result = match op {
        IntentionOp::LegacyCreate {
            destination,
            source,
        } => legacy_create(tables, index, destination, source, changes),
        IntentionOp::LegacyUpdate {
            id,
            destination,
            source,
        } => legacy_update(tables, index, id, destination, source, changes),
        IntentionOp::LegacyDelete { id } => legacy_delete(tables, index, id, changes),
        IntentionOp::Upsert {
            destination,
            source,
        } => upsert(tables, index, destination, source, changes),
        IntentionOp::DeleteExact {
            destination,
            source,
        } => delete_exact(tables, index, destination, source, changes),
    };
    match result {
        Ok(()) => CommandResult::Bool(true),
        Err(reason) => CommandResult::Error(reason),
    }
}

fn current_body(
    tables: &Tables,
    destination: &str,
) -> Option<(Arc<ConfigEntry>, ServiceIntentions)> {
    let entry = config_entry::get(tables, ConfigKind::ServiceIntentions, destination)?.clone();
    let body = (**entry.intentions()?).clone();
    Some((entry, body))
}

fn legacy_create(
    tables: &mut Tables,
    index: u64,
    destination: &str,
    source: &SourceIntention,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    let body = match current_body(tables, destination) {
        None => ServiceIntentions {
            sources: vec![source.clone()],
            ..Default::default()
        },
        Some((entry, mut body)) => {
            legacy_allowed(&entry)?;
            body.sources.push(source.clone());
            body
        }
    };
    write_back(tables, index, destination, body, true, changes)
}

fn legacy_update(
    tables: &mut Tables,
    index: u64,
    id: &str,
    destination: &str,
    source: &SourceIntention,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    let Some((entry, previous)) = by_legacy_id(tables, id) else {
        return Err(format!("Cannot modify non-existent intention: '{id}'"));
    };
    if !entry.name.eq_ignore_ascii_case(destination) {
        return Err(
            "Cannot modify Destination partition/namespace/name for an intention once it exists."
                .to_string(),
        );
    }
    let created = previous.legacy_create_time_ns;
    let destination = entry.name.clone();
    let (entry, mut body) = current_body(tables, &destination).expect("the entry holding the ID");
    legacy_allowed(&entry)?;
    let mut replacement = source.clone();
    // Consul's `UpdateOver`: the creation time stays the first write's.
    replacement.legacy_create_time_ns = created.or(replacement.legacy_create_time_ns);
    for slot in &mut body.sources {
        if slot.legacy_id == id {
            *slot = replacement.clone();
        }
    }
    write_back(tables, index, &destination, body, true, changes)
}

fn legacy_delete(
    tables: &mut Tables,
    index: u64,
    id: &str,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    let Some((entry, _)) = by_legacy_id(tables, id) else {
        return Err(format!("Cannot delete non-existent intention: '{id}'"));
    };
    let destination = entry.name.clone();
    let (entry, mut body) = current_body(tables, &destination).expect("the entry holding the ID");
    legacy_allowed(&entry)?;
    body.sources.retain(|s| s.legacy_id != id);
    write_back(tables, index, &destination, body, true, changes)
}

fn upsert(
    tables: &mut Tables,
    index: u64,
    destination: &str,
    source: &SourceIntention,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    let (name, body) = match current_body(tables, destination) {
        None => (
            ArcStr::from(destination),
            ServiceIntentions {
                sources: vec![source.clone()],
                ..Default::default()
            },
        ),
        Some((entry, mut body)) => {
            let slot = body.sources.iter_mut().find(|s| {
                s.peer.is_empty() && s.sameness_group.is_empty() && s.name == source.name
            });
            match slot {
                Some(slot) => *slot = source.clone(),
                None => body.sources.push(source.clone()),
            }
            (entry.name.clone(), body)
        }
    };
    write_back(tables, index, &name, body, false, changes)
}

fn delete_exact(
    tables: &mut Tables,
    index: u64,
    destination: &str,
    source: &str,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    let Some((entry, mut body)) = current_body(tables, destination) else {
        return Ok(());
    };
    let before = body.sources.len();
    body.sources
        .retain(|s| !(s.peer.is_empty() && s.sameness_group.is_empty() && s.name == source));
    if body.sources.len() == before {
        return Ok(());
    }
    let legacy = body.sources.iter().all(|s| !s.legacy_id.is_empty());
    write_back(tables, index, &entry.name.clone(), body, legacy, changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mesh::config_entry::ConfigEntryOp;
    use crate::store::Command;

    fn source(name: &str, action: Action) -> SourceIntention {
        SourceIntention {
            name: name.into(),
            action: Some(action),
            ..Default::default()
        }
    }

    fn legacy(name: &str, action: Action, id: &str, at_ns: i64) -> SourceIntention {
        SourceIntention {
            legacy_id: id.into(),
            legacy_create_time_ns: Some(at_ns),
            legacy_update_time_ns: Some(at_ns),
            ..source(name, action)
        }
    }

    fn run(t: &mut Tables, index: u64, op: IntentionOp) -> CommandResult {
        let mut changes = Vec::new();
        t.apply(
            index,
            &Command::ConfigEntry(ConfigEntryOp::Intention(op)),
            &mut changes,
        )
    }

    fn write_entry(t: &mut Tables, index: u64, destination: &str, sources: Vec<SourceIntention>) {
        let mut body = ServiceIntentions {
            sources,
            ..Default::default()
        };
        normalize(destination, &mut body, false);
        validate(destination, &body, false).unwrap();
        let mut changes = Vec::new();
        let r = t.apply(
            index,
            &Command::ConfigEntry(ConfigEntryOp::Set {
                entry: Box::new(intentions_entry(destination, body)),
                cas: None,
            }),
            &mut changes,
        );
        assert_eq!(r, CommandResult::Bool(true));
    }

    #[test]
    fn precedence_is_consuls() {
        assert_eq!(precedence("db", "web"), 9);
        assert_eq!(precedence("db", "*"), 8);
        assert_eq!(precedence("*", "web"), 6);
        assert_eq!(precedence("*", "*"), 5);
    }

    #[test]
    fn the_most_precise_intention_decides() {
        let mut t = Tables::default();
        assert_eq!(decide(&t, "web", "db"), Decision::Default);
        assert!(decide(&t, "web", "db").allowed(true));
        assert!(!decide(&t, "web", "db").allowed(false));
        write_entry(
            &mut t,
            5,
            "*",
            vec![source("*", Action::Deny), source("web", Action::Allow)],
        );
        assert!(decide(&t, "web", "db").allowed(false));
        assert!(!decide(&t, "api", "db").allowed(true));
        write_entry(
            &mut t,
            6,
            "db",
            vec![source("*", Action::Allow), source("web", Action::Deny)],
        );
        // db's own entry wins over the wildcard entry, its exact source over its wildcard.
        assert!(!decide(&t, "web", "db").allowed(true));
        assert!(decide(&t, "api", "db").allowed(false));
        assert!(!decide(&t, "WEB", "DB").allowed(true), "names fold");
        match decide(&t, "web", "db") {
            Decision::Matched {
                destination,
                source,
            } => {
                assert_eq!(
                    (destination, source.name.as_str(), source.precedence),
                    ("db", "web", 9)
                );
            }
            other => panic!("{other:?}"),
        }
        // An L7 source refuses L4 connections.
        let l7 = SourceIntention {
            name: "admin".into(),
            permissions_json: r#"[{"Action":"allow","HTTP":{"PathPrefix":"/"}}]"#.into(),
            ..Default::default()
        };
        write_entry(&mut t, 7, "db", vec![l7]);
        assert!(!decide(&t, "admin", "db").allowed(true));
        let found = matches(&t, "db", true);
        let order: Vec<(&str, &str)> = found
            .iter()
            .map(|(e, s)| (e.name.as_str(), s.name.as_str()))
            .collect();
        assert_eq!(order, vec![("db", "admin"), ("*", "web"), ("*", "*")]);
        assert_eq!(matches(&t, "web", false).len(), 2);
    }

    #[test]
    fn validation_follows_consul() {
        let body = |sources| ServiceIntentions {
            sources,
            ..Default::default()
        };
        let check = |dest: &str, sources: Vec<SourceIntention>| {
            let mut b = body(sources);
            normalize(dest, &mut b, false);
            validate(dest, &b, false)
        };
        assert_eq!(check("", vec![]).unwrap_err(), "Name is required");
        assert_eq!(
            check("db", vec![]).unwrap_err(),
            "At least one source is required"
        );
        assert_eq!(
            check("d*", vec![source("a", Action::Allow)]).unwrap_err(),
            "Name: wildcard character '*' cannot be used with partial values"
        );
        assert_eq!(
            check("db", vec![source("w*", Action::Allow)]).unwrap_err(),
            "Sources[0].Name: wildcard character '*' cannot be used with partial values"
        );
        assert_eq!(
            check(
                "db",
                vec![source("a", Action::Allow), source("a", Action::Deny)]
            )
            .unwrap_err(),
            "Sources[1] defines \"a\" more than once"
        );
        let no_action = SourceIntention {
            name: "a".into(),
            ..Default::default()
        };
        assert_eq!(
            check("db", vec![no_action]).unwrap_err(),
            "Sources[0].Action must be set to 'allow' or 'deny'"
        );
    }

    #[test]
    fn legacy_writes_keep_ids_and_times() {
        let mut t = Tables::default();
        t.observe_leader_time(1);
        let r = run(
            &mut t,
            5,
            IntentionOp::LegacyCreate {
                destination: "db".into(),
                source: legacy("web", Action::Allow, "id-1", 100),
            },
        );
        assert_eq!(r, CommandResult::Bool(true));
        let dup = run(
            &mut t,
            6,
            IntentionOp::LegacyCreate {
                destination: "db".into(),
                source: legacy("web", Action::Deny, "id-2", 200),
            },
        );
        assert_eq!(
            dup,
            CommandResult::Error("Sources[1] defines \"web\" more than once".into())
        );
        run(
            &mut t,
            7,
            IntentionOp::LegacyCreate {
                destination: "db".into(),
                source: legacy("*", Action::Deny, "id-3", 300),
            },
        );
        let (entry, found) = by_legacy_id(&t, "id-3").unwrap();
        assert_eq!((entry.name.as_str(), found.precedence), ("db", 8));
        let moved = run(
            &mut t,
            8,
            IntentionOp::LegacyUpdate {
                id: "id-1".into(),
                destination: "api".into(),
                source: legacy("web", Action::Deny, "id-1", 400),
            },
        );
        assert!(matches!(moved, CommandResult::Error(_)));
        let updated = run(
            &mut t,
            9,
            IntentionOp::LegacyUpdate {
                id: "id-1".into(),
                destination: "db".into(),
                source: legacy("web", Action::Deny, "id-1", 400),
            },
        );
        assert_eq!(updated, CommandResult::Bool(true));
        let (_, found) = by_legacy_id(&t, "id-1").unwrap();
        assert_eq!(found.action, Some(Action::Deny));
        assert_eq!(found.legacy_create_time_ns, Some(100), "creation time kept");
        assert_eq!(found.legacy_update_time_ns, Some(400));
        assert!(!decide(&t, "web", "db").allowed(true));
        assert_eq!(
            run(&mut t, 10, IntentionOp::LegacyDelete { id: "nope".into() }),
            CommandResult::Error("Cannot delete non-existent intention: 'nope'".into())
        );
        run(&mut t, 11, IntentionOp::LegacyDelete { id: "id-1".into() });
        run(&mut t, 12, IntentionOp::LegacyDelete { id: "id-3".into() });
        assert!(config_entry::get(&t, ConfigKind::ServiceIntentions, "db").is_none());
    }

    #[test]
    fn a_config_entry_destination_refuses_legacy_writes_and_takes_exact_ones() {
        let mut t = Tables::default();
        t.observe_leader_time(1);
        write_entry(&mut t, 13, "db", vec![source("web", Action::Allow)]);
        let refused = run(
            &mut t,
            14,
            IntentionOp::LegacyCreate {
                destination: "db".into(),
                source: legacy("api", Action::Allow, "id-4", 500),
            },
        );
        assert!(
            matches!(refused, CommandResult::Error(ref m) if m.starts_with("cannot use legacy intention API"))
        );
        // The exact API upserts and deletes by name.
        run(
            &mut t,
            15,
            IntentionOp::Upsert {
                destination: "db".into(),
                source: source("web", Action::Deny),
            },
        );
        assert!(!decide(&t, "web", "db").allowed(true));
        run(
            &mut t,
            16,
            IntentionOp::DeleteExact {
                destination: "db".into(),
                source: "web".into(),
            },
        );
        assert!(config_entry::get(&t, ConfigKind::ServiceIntentions, "db").is_none());
    }
}
