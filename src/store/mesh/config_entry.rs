//! Config entries: Consul's centrally stored service and mesh configuration, one row per
//! kind and name.
//!
//! The store keeps what the serving layer decoded and validated (`consul::config_entry`):
//! every kind but `service-intentions` as the compact JSON object Consul would render for its
//! fields (`EntryBody::Json`, fields in Consul's order), `service-intentions` typed
//! (`EntryBody::Intentions`), because authorization reads it on every new connection.
//!
//! Writes follow Consul's state store: an upsert replaces the row (keeping `CreateIndex`) and
//! always moves `ModifyIndex`; `?cas=0` writes only a new entry, `?cas=N` only over
//! `ModifyIndex == N`; a CAS delete of a missing entry or a different index answers `false`.
//! Before a write lands, the discovery chains it touches are checked as Consul checks them:
//! a `service-router` or `service-splitter` needs an HTTP-family protocol for its service,
//! whether the write adds the router or takes the protocol away.

use super::intentions::{self, IntentionOp, ServiceIntentions};
use crate::store::{Change, ChangeKey, CommandResult, Table, Tables};
use arcstr::ArcStr;
use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The kinds of config entry praetor stores, Consul's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConfigKind {
    ServiceDefaults,
    ProxyDefaults,
    ServiceRouter,
    ServiceSplitter,
    ServiceResolver,
    IngressGateway,
    TerminatingGateway,
    ServiceIntentions,
    Mesh,
    /// Which services are exported to which peers (appended last: stored kinds keep their
    /// encoding).
    ExportedServices,
}

impl ConfigKind {
    pub const ALL: [ConfigKind; 10] = [
        ConfigKind::ServiceDefaults,
        ConfigKind::ProxyDefaults,
        ConfigKind::ServiceRouter,
        ConfigKind::ServiceSplitter,
        ConfigKind::ServiceResolver,
        ConfigKind::IngressGateway,
        ConfigKind::TerminatingGateway,
        ConfigKind::ServiceIntentions,
        ConfigKind::Mesh,
        ConfigKind::ExportedServices,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ServiceDefaults => "service-defaults",
            ConfigKind::ProxyDefaults => "proxy-defaults",
            ConfigKind::ServiceRouter => "service-router",
            ConfigKind::ServiceSplitter => "service-splitter",
            ConfigKind::ServiceResolver => "service-resolver",
            ConfigKind::IngressGateway => "ingress-gateway",
            ConfigKind::TerminatingGateway => "terminating-gateway",
            ConfigKind::ServiceIntentions => "service-intentions",
            ConfigKind::Mesh => "mesh",
            ConfigKind::ExportedServices => "exported-services",
        }
    }

    /// The kind named exactly `text`, as Consul's `MakeConfigEntry` matches it.
    pub fn parse(text: &str) -> Option<ConfigKind> {
        ConfigKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// The kind-specific part of an entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EntryBody {
    /// Every field but `Kind`, `Name` and the indexes, as one compact JSON object in the
    /// order Consul renders them.
    Json(ArcStr),
    /// A `service-intentions` entry.
    Intentions(Arc<ServiceIntentions>),
}

/// One config entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigEntry {
    pub kind: ConfigKind,
    /// The name as written (`global` for proxy-defaults, `mesh` for mesh).
    pub name: ArcStr,
    pub body: EntryBody,
    /// The protocol this entry sets for services, lowercase: `Protocol` of a
    /// `service-defaults`, `Config.protocol` of `proxy-defaults`; empty when it sets none.
    /// The discovery-chain checks read it.
    pub protocol: ArcStr,
    pub create_index: u64,
    pub modify_index: u64,
}

impl ConfigEntry {
    /// The typed intentions of a `service-intentions` entry.
    pub fn intentions(&self) -> Option<&Arc<ServiceIntentions>> {
        match &self.body {
            EntryBody::Intentions(found) => Some(found),
            EntryBody::Json(_) => None,
        }
    }

    /// The JSON fields of any other kind.
    pub fn json(&self) -> Option<&str> {
        match &self.body {
            EntryBody::Json(text) => Some(text),
            EntryBody::Intentions(_) => None,
        }
    }
}

/// Longest config entry name accepted, in bytes (Consul bounds names through its request
/// size; a name is also a watch key).
pub const CONFIG_ENTRY_NAME_BYTES_MAX: usize = 512;

/// The protocol a service has when no entry sets one.
pub const DEFAULT_PROTOCOL: &str = "tcp";

/// The row key and watch key of an entry: `<kind>/<folded name>`.
pub fn entry_key(kind: ConfigKind, name: &str) -> ArcStr {
    let folded = crate::store::catalog::rows::fold(name);
    let mut key = String::with_capacity(kind.as_str().len() + 1 + folded.len());
    key.push_str(kind.as_str());
    key.push('/');
    key.push_str(&folded);
    ArcStr::from(key)
}

/// The watch prefix of a kind's list: `<kind>/`.
pub fn kind_prefix(kind: ConfigKind) -> ArcStr {
    ArcStr::from(format!("{}/", kind.as_str()))
}

/// The config entry tables of one store version.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ConfigEntryTables {
    /// `entry_key(kind, name)` → entry.
    pub entries: OrdMap<ArcStr, Arc<ConfigEntry>>,
}

/// A write to the config entries, replicated through Raft.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ConfigEntryOp {
    /// Upsert; with `cas`, only as Consul's `upsert-cas` allows.
    Set {
        entry: Box<ConfigEntry>,
        cas: Option<u64>,
    },
    /// Delete; with `cas`, only when the entry exists at that `ModifyIndex`.
    Delete {
        kind: ConfigKind,
        name: String,
        cas: Option<u64>,
    },
    /// Bootstrap entries from agent configuration: written only where no entry exists.
    Bootstrap { entries: Vec<ConfigEntry> },
    /// A legacy `/v1/connect/intentions` write on one source of a `service-intentions` entry.
    Intention(IntentionOp),
}

/// The entry of `kind` named `name` (case-insensitively, as Consul's index folds names).
pub fn get<'t>(tables: &'t Tables, kind: ConfigKind, name: &str) -> Option<&'t Arc<ConfigEntry>> {
    tables
        .mesh
        .config_entries
        .entries
        .get(&*entry_key(kind, name))
}

/// Every entry of `kind`, in folded-name order.
pub fn list(tables: &Tables, kind: ConfigKind) -> impl Iterator<Item = &Arc<ConfigEntry>> {
    let prefix = kind_prefix(kind);
    tables
        .mesh
        .config_entries
        .entries
        .range(prefix.clone()..)
        .take_while(move |(key, _)| key.starts_with(prefix.as_str()))
        .map(|(_, entry)| entry)
}

/// Every entry of every kind, in kind then name order.
pub fn all(tables: &Tables) -> impl Iterator<Item = &Arc<ConfigEntry>> {
    tables.mesh.config_entries.entries.values()
}

/// The index a read of config entries reports: the table's (Consul's `config-entries`).
pub fn entries_index(tables: &Tables) -> u64 {
    tables.table_index(Table::ConfigEntries)
}

/// The protocol of `service` as its discovery chain sees it: its `service-defaults`, else
/// the `proxy-defaults` `global` entry, else `tcp`.
pub fn service_protocol<'t>(tables: &'t Tables, service: &str) -> &'t str {
    protocol_in(&tables.mesh.config_entries.entries, service)
}

fn protocol_in<'m>(entries: &'m OrdMap<ArcStr, Arc<ConfigEntry>>, service: &str) -> &'m str {
    let own = entries
        .get(&*entry_key(ConfigKind::ServiceDefaults, service))
        .map(|e| e.protocol.as_str())
        .filter(|p| !p.is_empty());
    let global = || {
        entries
            .get(&*entry_key(ConfigKind::ProxyDefaults, "global"))
            .map(|e| e.protocol.as_str())
            .filter(|p| !p.is_empty())
    };
    own.or_else(global).unwrap_or(DEFAULT_PROTOCOL)
}

/// Whether `protocol` permits routers and splitters (Consul's
/// `enableAdvancedRoutingForProtocol`).
pub fn is_http_family(protocol: &str) -> bool {
    matches!(protocol, "http" | "http2" | "grpc")
}

/// Applies one config entry write at `index`.
pub(crate) fn apply(
    tables: &mut Tables,
    index: u64,
    op: &ConfigEntryOp,
    changes: &mut Vec<Change>,
) -> CommandResult {
    let before = changes.len();
    let result = match op {
        ConfigEntryOp::Set { entry, cas } => set(tables, index, entry, *cas, changes),
        ConfigEntryOp::Delete { kind, name, cas } => {
            delete(tables, index, *kind, name, *cas, changes)
        }
        ConfigEntryOp::Bootstrap { entries } => bootstrap(tables, index, entries, changes),
        ConfigEntryOp::Intention(op) => intentions::apply(tables, index, op, changes),
    };
    if changes.len() > before {
        tables.bump_table(Table::ConfigEntries, index);
    }
    debug_assert!(
        !matches!(result, CommandResult::Error(_)) || changes.len() == before,
        "a refused config entry write touches nothing"
    );
    result
}

/// Installs `entry` under its key at `index`, keeping the create index of the row it
/// replaces, after the discovery-chain check. The caller decided the write may happen.
pub(super) fn install(
    tables: &mut Tables,
    index: u64,
    entry: &ConfigEntry,
    changes: &mut Vec<Change>,
) -> Result<(), String> {
    let key = entry_key(entry.kind, &entry.name);
    let entries = &tables.mesh.config_entries.entries;
    let create_index = entries.get(&key).map_or(index, |e| e.create_index);
    let mut row = entry.clone();
    row.create_index = create_index;
    row.modify_index = index;
    let mut next = entries.clone();
    next.insert(key.clone(), Arc::new(row));
    check_chains(&next, entry.kind, &entry.name)?;
    tables.mesh.config_entries.entries = next;
    changes.push(Change {
        table: Table::ConfigEntries,
        key: ChangeKey::Key(Arc::from(key.as_str())),
    });
    Ok(())
}

/// Removes the row at `key` at `index`, after the discovery-chain check.
pub(super) fn remove(
    tables: &mut Tables,
    key: &ArcStr,
    changes: &mut Vec<Change>,
) -> Result<bool, String> {
    let entries = &tables.mesh.config_entries.entries;
    let Some(existing) = entries.get(key).cloned() else {
        return Ok(false);
    };
    let mut next = entries.clone();
    next.remove(key);
    check_chains(&next, existing.kind, &existing.name)?;
    tables.mesh.config_entries.entries = next;
    changes.push(Change {
        table: Table::ConfigEntries,
        key: ChangeKey::Key(Arc::from(key.as_str())),
    });
    Ok(true)
}

fn set(
    tables: &mut Tables,
    index: u64,
    entry: &ConfigEntry,
    cas: Option<u64>,
    changes: &mut Vec<Change>,
) -> CommandResult {
    debug_assert_eq!(
        entry.kind == ConfigKind::ServiceIntentions,
        entry.intentions().is_some(),
        "service-intentions entries are typed, every other kind is JSON"
    );
    if let Some(cas) = cas {
        let existing = get(tables, entry.kind, &entry.name).map(|e| e.modify_index);
        let allowed = match existing {
            None => cas == 0,
            Some(modify_index) => cas != 0 && cas == modify_index,
        };
        if !allowed {
            return CommandResult::Bool(false);
        }
    }
    match install(tables, index, entry, changes) {
        Ok(()) => CommandResult::Bool(true),
        Err(reason) => CommandResult::Error(reason),
    }
}

fn delete(
    tables: &mut Tables,
    _index: u64,
    kind: ConfigKind,
    name: &str,
    cas: Option<u64>,
    changes: &mut Vec<Change>,
) -> CommandResult {
    let key = entry_key(kind, name);
    if let Some(cas) = cas {
        let existing = tables.mesh.config_entries.entries.get(&key);
        if existing.is_none_or(|e| e.modify_index != cas) {
            return CommandResult::Bool(false);
        }
    }
    match remove(tables, &key, changes) {
        Ok(_) => CommandResult::Bool(true),
        Err(reason) => CommandResult::Error(reason),
    }
}

/// Writes each bootstrap entry that does not exist yet; one that fails the chain check is
/// skipped with the others kept (the agent logged the configuration it came from). Answers
/// whether anything was written.
fn bootstrap(
    tables: &mut Tables,
    index: u64,
    entries: &[ConfigEntry],
    changes: &mut Vec<Change>,
) -> CommandResult {
    let mut wrote = false;
    for entry in entries {
        if get(tables, entry.kind, &entry.name).is_some() {
            continue;
        }
        wrote |= install(tables, index, entry, changes).is_ok();
    }
    CommandResult::Bool(wrote)
}

/// Consul's graph check for the chains a write to `kind`/`name` could change: every router
/// and splitter whose service's protocol the write may decide must still have an HTTP-family
/// protocol.
fn check_chains(
    entries: &OrdMap<ArcStr, Arc<ConfigEntry>>,
    kind: ConfigKind,
    name: &str,
) -> Result<(), String> {
    let check = |service: &str| -> Result<(), String> {
        let routed = [ConfigKind::ServiceRouter, ConfigKind::ServiceSplitter]
            .into_iter()
            .any(|k| entries.contains_key(&*entry_key(k, service)));
        let protocol = protocol_in(entries, service);
        if routed && !is_http_family(protocol) {
            return Err(format!(
                "discovery chain {service:?} uses a protocol {protocol:?} that does not permit advanced routing or splitting behavior"
            ));
        }
        Ok(())
    };
    match kind {
        ConfigKind::ServiceRouter | ConfigKind::ServiceSplitter | ConfigKind::ServiceDefaults => {
            check(name)
        }
        ConfigKind::ProxyDefaults => {
            // The global protocol reaches every service without its own.
            for (key, entry) in entries.iter() {
                if key.starts_with("service-router/") || key.starts_with("service-splitter/") {
                    check(&entry.name)?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Command;

    pub(crate) fn json_entry(
        kind: ConfigKind,
        name: &str,
        json: &str,
        protocol: &str,
    ) -> ConfigEntry {
        ConfigEntry {
            kind,
            name: name.into(),
            body: EntryBody::Json(json.into()),
            protocol: protocol.into(),
            create_index: 0,
            modify_index: 0,
        }
    }

    fn run(tables: &mut Tables, index: u64, op: ConfigEntryOp) -> (CommandResult, Vec<Change>) {
        let mut changes = Vec::new();
        let result = tables.apply(index, &Command::ConfigEntry(op), &mut changes);
        (result, changes)
    }

    fn set(entry: ConfigEntry, cas: Option<u64>) -> ConfigEntryOp {
        ConfigEntryOp::Set {
            entry: Box::new(entry),
            cas,
        }
    }

    #[test]
    fn upserts_keep_the_create_index_and_cas_follows_consul() {
        let mut t = Tables::default();
        let web = json_entry(
            ConfigKind::ServiceDefaults,
            "Web",
            r#"{"Protocol":"http"}"#,
            "http",
        );
        let (r, changes) = run(&mut t, 5, set(web.clone(), Some(1)));
        assert_eq!(r, CommandResult::Bool(false), "cas≠0 on a missing entry");
        assert!(changes.is_empty());
        let (r, changes) = run(&mut t, 6, set(web.clone(), Some(0)));
        assert_eq!(r, CommandResult::Bool(true));
        assert_eq!(
            changes,
            vec![Change {
                table: Table::ConfigEntries,
                key: ChangeKey::Key(Arc::from("service-defaults/web")),
            }]
        );
        assert_eq!(t.table_index(Table::ConfigEntries), 6);
        let (r, _) = run(&mut t, 7, set(web.clone(), Some(0)));
        assert_eq!(r, CommandResult::Bool(false), "cas=0 on an existing entry");
        let (r, _) = run(&mut t, 8, set(web.clone(), Some(6)));
        assert_eq!(r, CommandResult::Bool(true));
        let row = get(&t, ConfigKind::ServiceDefaults, "WEB").unwrap();
        assert_eq!((row.create_index, row.modify_index), (6, 8));
        assert_eq!(row.name, "Web");
        assert_eq!(list(&t, ConfigKind::ServiceDefaults).count(), 1);
        assert_eq!(list(&t, ConfigKind::ProxyDefaults).count(), 0);
        // Deletes: CAS on a different index or a missing entry is false; a plain delete of a
        // missing entry is true and touches nothing.
        let delete = |cas| ConfigEntryOp::Delete {
            kind: ConfigKind::ServiceDefaults,
            name: "web".into(),
            cas,
        };
        assert_eq!(
            run(&mut t, 9, delete(Some(6))).0,
            CommandResult::Bool(false)
        );
        assert_eq!(
            run(&mut t, 10, delete(Some(8))).0,
            CommandResult::Bool(true)
        );
        let (r, changes) = run(&mut t, 11, delete(None));
        assert_eq!(r, CommandResult::Bool(true));
        assert!(changes.is_empty());
        assert_eq!(
            run(&mut t, 12, delete(Some(8))).0,
            CommandResult::Bool(false)
        );
        assert_eq!(t.table_index(Table::ConfigEntries), 10);
    }

    #[test]
    fn routers_and_splitters_need_an_http_protocol_both_ways() {
        let mut t = Tables::default();
        let router = json_entry(ConfigKind::ServiceRouter, "web", "{}", "");
        let refused = run(&mut t, 5, set(router.clone(), None)).0;
        assert_eq!(
            refused,
            CommandResult::Error(
                "discovery chain \"web\" uses a protocol \"tcp\" that does not permit advanced routing or splitting behavior".into()
            )
        );
        let global = json_entry(ConfigKind::ProxyDefaults, "global", "{}", "http");
        assert_eq!(
            run(&mut t, 6, set(global, None)).0,
            CommandResult::Bool(true)
        );
        assert_eq!(
            run(&mut t, 7, set(router, None)).0,
            CommandResult::Bool(true)
        );
        // A service-defaults taking the protocol away is refused, and so is deleting the
        // global protocol.
        let tcp = json_entry(ConfigKind::ServiceDefaults, "web", "{}", "tcp");
        assert!(matches!(
            run(&mut t, 8, set(tcp, None)).0,
            CommandResult::Error(_)
        ));
        let delete_global = ConfigEntryOp::Delete {
            kind: ConfigKind::ProxyDefaults,
            name: "global".into(),
            cas: None,
        };
        assert!(matches!(
            run(&mut t, 9, delete_global).0,
            CommandResult::Error(_)
        ));
        assert_eq!(service_protocol(&t, "web"), "http");
        assert_eq!(service_protocol(&t, "db"), "http");
    }

    #[test]
    fn bootstrap_writes_only_missing_entries() {
        let mut t = Tables::default();
        let mine = json_entry(
            ConfigKind::ServiceDefaults,
            "web",
            r#"{"Protocol":"grpc"}"#,
            "grpc",
        );
        run(&mut t, 5, set(mine, None));
        let boot = ConfigEntryOp::Bootstrap {
            entries: vec![
                json_entry(
                    ConfigKind::ServiceDefaults,
                    "web",
                    r#"{"Protocol":"http"}"#,
                    "http",
                ),
                json_entry(ConfigKind::ProxyDefaults, "global", "{}", ""),
            ],
        };
        let (r, changes) = run(&mut t, 6, boot);
        assert_eq!(r, CommandResult::Bool(true));
        assert_eq!(changes.len(), 1);
        assert_eq!(
            get(&t, ConfigKind::ServiceDefaults, "web")
                .unwrap()
                .protocol,
            "grpc"
        );
        assert!(get(&t, ConfigKind::ProxyDefaults, "global").is_some());
    }
}
