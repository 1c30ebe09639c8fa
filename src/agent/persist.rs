//! Persistence of the agent's local state, so that an agent restarted on the same data
//! directory serves what its API registered before, as Consul's agent does.
//!
//! Like Consul, the agent keeps three kinds of record, each in its own file and each written
//! and removed on its own:
//!
//! - a *service* (`<data_dir>/agent/local/services/`): the registration alone, without its
//!   checks, so re-registering a service without `Check` leaves its checks' files alone;
//! - a *check* (`.../local/checks/`): how the check runs, or, for the maintenance checks
//!   `_service_maintenance:<id>` and `_node_maintenance`, just its name, service and reason;
//! - a TTL check's *state* (`.../local/check-state/`): the status and output its last update
//!   set and the wall-clock time that update expires, so a restart inside the TTL keeps it.
//!
//! A file is named by the SHA-256 of its record's ID and holds that ID, so any ID is a safe
//! file name and a file that does not hold the ID its name says is ignored. Writes go to a
//! temporary file that is synced, renamed over the record and followed by a sync of the
//! directory: a crash leaves the old record or the new one, never a mix or nothing.
//!
//! Config-file services and checks are never persisted (the files are read again at start).
//! Records of the first format (one file per registration *body*, under `agent/services/`
//! and `agent/checks/`) are read once by [`Store::read_legacy`] and then deleted.

use crate::consul::definition::CheckSpec;
use crate::store::catalog::{ServiceRegistration, Status};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Largest record read back (a registration body is limited far below this).
const RECORD_BYTES_MAX: u64 = 16 << 20;
/// Most records of one kind read at start: far above any real agent (Consul's agents carry
/// tens to hundreds), low enough that a directory filled by mistake cannot exhaust memory.
const RECORDS_MAX: usize = 100_000;

/// A persisted check: its identity, and how it runs (`None` for a maintenance check, which
/// has no runner and is critical while it exists).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    pub id: String,
    pub name: String,
    pub notes: String,
    pub service_id: String,
    pub spec: Option<CheckSpec>,
    /// The ACL token it was registered with (empty: none), kept with the record.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
}

/// The state a TTL update left a check in, valid until `expires_unix_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckState {
    pub check_id: String,
    pub status: Status,
    pub output: String,
    /// Milliseconds since the Unix epoch (a wall-clock time: it must outlive the process).
    pub expires_unix_ms: u64,
}

/// A service record: the registration as the agent holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ServiceRecord {
    id: String,
    service: ServiceRegistration,
    /// The ACL token it was registered with (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    token: String,
}

/// One record of the first format: a registration body as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegacyEntry {
    pub id: String,
    pub body: String,
    #[serde(default)]
    pub replace_existing_checks: bool,
}

/// What the first format held: service bodies (with inline checks) and check bodies.
#[derive(Debug, Default)]
pub struct Legacy {
    pub services: Vec<LegacyEntry>,
    pub checks: Vec<LegacyEntry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Service,
    Check,
    CheckState,
}

impl Kind {
    fn dir(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::Check => "checks",
            Kind::CheckState => "check-state",
        }
    }
}

/// The agent's records under one data directory.
pub struct Store {
    /// `<data_dir>/agent`.
    root: PathBuf,
}

fn file_name(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        + ".json"
}

/// Writes `bytes` as `dir/name` so that a crash leaves the old file or the new one.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    let temporary = dir.join(format!("{name}.tmp"));
    {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, &path)?;
    // The rename is durable only once the directory entry is.
    std::fs::File::open(dir)?.sync_all()
}

fn remove_file(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Reads every `*.json` record of a directory; unreadable files are reported and skipped.
fn read_records<T: DeserializeOwned>(dir: &Path, what: &str) -> Vec<(PathBuf, T)> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut records = Vec::new();
    for item in listing.flatten() {
        let path = item.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        if records.len() >= RECORDS_MAX {
            log::warn!(
                "agent: more than {RECORDS_MAX} persisted {what} in {}; the rest are ignored",
                dir.display()
            );
            break;
        }
        let too_big = item
            .metadata()
            .map(|m| m.len() > RECORD_BYTES_MAX)
            .unwrap_or(true);
        let parsed = if too_big {
            Err(format!("larger than {RECORD_BYTES_MAX} bytes"))
        } else {
            std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice::<T>(&bytes).map_err(|e| e.to_string()))
        };
        match parsed {
            Ok(record) => records.push((path, record)),
            Err(e) => log::warn!("agent: ignoring persisted {what} {}: {e}", path.display()),
        }
    }
    records
}

/// Keeps the records whose file is named after the ID they hold.
fn named_by_id<T>(records: Vec<(PathBuf, T)>, id: impl Fn(&T) -> &str, what: &str) -> Vec<T> {
    records
        .into_iter()
        .filter_map(|(path, record)| {
            let expected = file_name(id(&record));
            if path.file_name().and_then(|n| n.to_str()) == Some(expected.as_str()) {
                Some(record)
            } else {
                log::warn!(
                    "agent: ignoring persisted {what} {}: it holds {:?}, whose file is {expected}",
                    path.display(),
                    id(&record)
                );
                None
            }
        })
        .collect()
}

impl Store {
    pub fn new(data_dir: &Path) -> Store {
        Store {
            root: data_dir.join("agent"),
        }
    }

    fn dir(&self, kind: Kind) -> PathBuf {
        self.root.join("local").join(kind.dir())
    }

    fn path(&self, kind: Kind, id: &str) -> PathBuf {
        self.dir(kind).join(file_name(id))
    }

    fn save<T: Serialize>(&self, kind: Kind, id: &str, record: &T) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        write_atomic(&self.dir(kind), &file_name(id), &bytes)
    }

    pub fn save_service(&self, service: &ServiceRegistration, token: &str) -> std::io::Result<()> {
        assert!(!service.id.is_empty(), "a service is persisted by its ID");
        let record = ServiceRecord {
            id: service.id.clone(),
            service: service.clone(),
            token: token.to_string(),
        };
        self.save(Kind::Service, &service.id, &record)
    }

    pub fn remove_service(&self, id: &str) -> std::io::Result<()> {
        remove_file(&self.path(Kind::Service, id))
    }

    pub fn save_check(&self, check: &CheckRecord) -> std::io::Result<()> {
        assert!(!check.id.is_empty(), "a check is persisted by its ID");
        if let Some(spec) = &check.spec {
            assert_eq!(
                spec.id, check.id,
                "a check record and its spec name one check"
            );
        }
        self.save(Kind::Check, &check.id, check)
    }

    /// Removes a check and its TTL state.
    pub fn remove_check(&self, id: &str) -> std::io::Result<()> {
        let removed = remove_file(&self.path(Kind::Check, id));
        remove_file(&self.path(Kind::CheckState, id))?;
        removed
    }

    /// Removes a check's record but not its TTL state (a config file now defines it).
    pub fn remove_check_record(&self, id: &str) -> std::io::Result<()> {
        remove_file(&self.path(Kind::Check, id))
    }

    pub fn save_check_state(&self, state: &CheckState) -> std::io::Result<()> {
        self.save(Kind::CheckState, &state.check_id, state)
    }

    /// Every persisted service with the token it was registered with, in ID order.
    pub fn load_services(&self) -> Vec<(ServiceRegistration, String)> {
        let records = read_records::<ServiceRecord>(&self.dir(Kind::Service), "service");
        let mut services: Vec<(ServiceRegistration, String)> =
            named_by_id(records, |r| r.id.as_str(), "service")
                .into_iter()
                .filter(|r| r.id == r.service.id)
                .map(|r| (r.service, r.token))
                .collect();
        services.sort_by(|a, b| a.0.id.cmp(&b.0.id));
        services
    }

    /// Every persisted check, in ID order.
    pub fn load_checks(&self) -> Vec<CheckRecord> {
        let records = read_records::<CheckRecord>(&self.dir(Kind::Check), "check");
        let mut checks = named_by_id(records, |r| r.id.as_str(), "check");
        checks.retain(|c| c.spec.as_ref().is_none_or(|s| s.id == c.id));
        checks.sort_by(|a, b| a.id.cmp(&b.id));
        checks
    }

    /// A check's TTL state, if one is persisted and still valid at `now_unix_ms`; an
    /// expired one is removed, as Consul purges it.
    pub fn load_check_state(&self, id: &str, now_unix_ms: u64) -> Option<CheckState> {
        let path = self.path(Kind::CheckState, id);
        if !path.exists() {
            return None;
        }
        let bytes = std::fs::read(&path).ok()?;
        let state = match serde_json::from_slice::<CheckState>(&bytes) {
            Ok(state) if state.check_id == id => state,
            Ok(_) | Err(_) => {
                log::warn!("agent: ignoring persisted check state {}", path.display());
                return None;
            }
        };
        if state.expires_unix_ms <= now_unix_ms {
            if let Err(e) = remove_file(&path) {
                log::warn!("agent: cannot remove expired check state {id:?}: {e}");
            }
            return None;
        }
        Some(state)
    }

    /// Reads the records of the first format, if any. The caller registers them again,
    /// which persists them in the current format, and then calls [`Store::remove_legacy`].
    pub fn read_legacy(&self) -> Legacy {
        let read = |dir: &str| -> Vec<LegacyEntry> {
            let mut entries: Vec<LegacyEntry> =
                read_records::<LegacyEntry>(&self.root.join(dir), dir)
                    .into_iter()
                    .map(|(_, entry)| entry)
                    .collect();
            entries.sort_by(|a, b| a.id.cmp(&b.id));
            entries
        };
        Legacy {
            services: read("services"),
            checks: read("checks"),
        }
    }

    /// Deletes the records of the first format.
    pub fn remove_legacy(&self) {
        for dir in ["services", "checks"] {
            let path = self.root.join(dir);
            if path.exists() {
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    log::warn!("agent: cannot remove {}: {e}", path.display());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::definition::CheckKind;
    use crate::store::catalog::CheckDefinition;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "praetor-persist-{name}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn ttl_check(id: &str, service_id: &str) -> CheckRecord {
        CheckRecord {
            id: id.into(),
            name: id.into(),
            notes: String::new(),
            service_id: service_id.into(),
            spec: Some(CheckSpec {
                id: id.into(),
                name: id.into(),
                notes: String::new(),
                service_id: service_id.into(),
                initial_status: Status::Critical,
                initial_output: String::new(),
                kind: CheckKind::Ttl,
                definition: CheckDefinition {
                    ttl_ns: 30_000_000_000,
                    ..Default::default()
                },
                success_before_passing: 0,
                failures_before_warning: 0,
                failures_before_critical: 0,
            }),
            token: "check-token".into(),
        }
    }

    #[test]
    fn services_checks_and_states_are_kept_and_removed_separately() {
        let dir = scratch("kinds");
        let store = Store::new(&dir);
        let service = ServiceRegistration {
            id: "web/1".into(),
            name: "web".into(),
            port: 80,
            ..Default::default()
        };
        store.save_service(&service, "service-token").unwrap();
        let check = ttl_check("service:web/1", "web/1");
        store.save_check(&check).unwrap();
        let maintenance = CheckRecord {
            id: "_node_maintenance".into(),
            name: "Node Maintenance Mode".into(),
            notes: "patching".into(),
            service_id: String::new(),
            spec: None,
            token: String::new(),
        };
        store.save_check(&maintenance).unwrap();
        let state = CheckState {
            check_id: check.id.clone(),
            status: Status::Passing,
            output: "fine".into(),
            expires_unix_ms: 2_000,
        };
        store.save_check_state(&state).unwrap();

        // Tokens are kept with their records.
        assert_eq!(
            store.load_services(),
            vec![(service.clone(), "service-token".to_string())]
        );
        assert_eq!(
            store.load_checks(),
            vec![maintenance.clone(), check.clone()]
        );
        assert_eq!(store.load_check_state(&check.id, 1_999), Some(state));
        // Removing the service record leaves the checks: each record stands alone.
        store.remove_service("web/1").unwrap();
        store.remove_service("web/1").unwrap();
        assert!(store.load_services().is_empty());
        assert_eq!(store.load_checks().len(), 2);
        // A check goes with its state.
        store.remove_check(&check.id).unwrap();
        assert_eq!(store.load_checks(), vec![maintenance]);
        assert_eq!(store.load_check_state(&check.id, 0), None);
        // No temporary file is left behind.
        let leftovers = std::fs::read_dir(store.dir(Kind::Check))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "tmp"))
            .count();
        assert_eq!(leftovers, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn expired_check_state_is_not_restored_and_is_purged() {
        let dir = scratch("expiry");
        let store = Store::new(&dir);
        let state = CheckState {
            check_id: "ttl".into(),
            status: Status::Warning,
            output: "slow".into(),
            expires_unix_ms: 5_000,
        };
        store.save_check_state(&state).unwrap();
        assert_eq!(store.load_check_state("ttl", 4_999), Some(state));
        assert_eq!(store.load_check_state("ttl", 5_000), None);
        assert!(!store.path(Kind::CheckState, "ttl").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_record_under_another_ids_name_is_ignored() {
        let dir = scratch("names");
        let store = Store::new(&dir);
        store.save_check(&ttl_check("a", "")).unwrap();
        std::fs::rename(
            store.path(Kind::Check, "a"),
            store.path(Kind::Check, "other"),
        )
        .unwrap();
        assert!(store.load_checks().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn legacy_records_are_read_once() {
        let dir = scratch("legacy");
        let store = Store::new(&dir);
        let legacy_dir = dir.join("agent").join("services");
        std::fs::create_dir_all(&legacy_dir).unwrap();
        let entry = LegacyEntry {
            id: "web".into(),
            body: r#"{"Name":"web"}"#.into(),
            replace_existing_checks: true,
        };
        std::fs::write(
            legacy_dir.join(file_name("web")),
            serde_json::to_vec(&entry).unwrap(),
        )
        .unwrap();
        let legacy = store.read_legacy();
        assert_eq!(legacy.services, vec![entry]);
        assert!(legacy.checks.is_empty());
        store.remove_legacy();
        assert!(!legacy_dir.exists());
        assert!(store.read_legacy().services.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
