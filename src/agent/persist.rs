//! Persistence of services and checks registered through the agent API, so that an agent
//! restarted on the same data directory serves them again, as Consul's agent does.
//!
//! Each entry is one small file under `<data_dir>/agent/services/` or `.../checks/`, named
//! by the SHA-256 of its ID and holding the registration body as received. Files are written
//! to a temporary name and renamed, so a crash leaves either the old or the new definition.
//! Config-file entries are not persisted: the config is read again at startup.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Largest persisted entry read back (a registration body is limited far below this).
const ENTRY_BYTES_MAX: u64 = 16 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Service,
    Check,
}

impl Kind {
    fn dir(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::Check => "checks",
        }
    }
}

/// One persisted registration.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub id: String,
    /// The JSON body as it was registered.
    pub body: String,
    #[serde(default)]
    pub replace_existing_checks: bool,
}

pub struct Store {
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

impl Store {
    pub fn new(data_dir: &Path) -> Store {
        Store {
            root: data_dir.join("agent"),
        }
    }

    pub fn save(&self, kind: Kind, entry: &Entry) -> std::io::Result<()> {
        let dir = self.root.join(kind.dir());
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(file_name(&entry.id));
        let temporary = path.with_extension("tmp");
        let bytes = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &path)
    }

    pub fn remove(&self, kind: Kind, id: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.root.join(kind.dir()).join(file_name(id))) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every readable entry of a kind; unreadable files are reported and skipped.
    pub fn load(&self, kind: Kind) -> Vec<Entry> {
        let dir = self.root.join(kind.dir());
        let Ok(listing) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut entries = Vec::new();
        for item in listing.flatten() {
            let path = item.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let too_big = item
                .metadata()
                .map(|m| m.len() > ENTRY_BYTES_MAX)
                .unwrap_or(true);
            let parsed = if too_big {
                Err("too large".to_string())
            } else {
                std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| {
                        serde_json::from_slice::<Entry>(&bytes).map_err(|e| e.to_string())
                    })
            };
            match parsed {
                Ok(entry) => entries.push(entry),
                Err(e) => log::warn!(
                    "agent: ignoring persisted {} {}: {e}",
                    kind.dir(),
                    path.display()
                ),
            }
        }
        entries.sort_by(|a, b| a.id.cmp(&b.id));
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_remove() {
        let dir = std::env::temp_dir().join(format!("praetor-persist-{}", std::process::id()));
        let store = Store::new(&dir);
        let entry = Entry {
            id: "web/1".into(),
            body: r#"{"Name":"web"}"#.into(),
            replace_existing_checks: true,
        };
        store.save(Kind::Service, &entry).unwrap();
        store
            .save(
                Kind::Check,
                &Entry {
                    id: "c".into(),
                    body: "{}".into(),
                    replace_existing_checks: false,
                },
            )
            .unwrap();
        assert_eq!(store.load(Kind::Service), vec![entry.clone()]);
        store.remove(Kind::Service, "web/1").unwrap();
        store.remove(Kind::Service, "web/1").unwrap();
        assert!(store.load(Kind::Service).is_empty());
        assert_eq!(store.load(Kind::Check).len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
