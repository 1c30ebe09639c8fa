//! Cluster peerings: Consul's `peering`, `peering-trust-bundles` and `peering-secrets`
//! tables. A peering is one side of a relationship with another, separately run cluster:
//! the acceptor's row is created by generating a token (state `PENDING`), the dialer's by
//! establishing with that token (`ESTABLISHING`); the peer stream (`xds::peerstream`)
//! moves both to `ACTIVE`, to `FAILING` when it breaks, and the other side to `TERMINATED`
//! when one side deletes its peering.
//!
//! Writes follow Consul's state store (`state/peering.go`): a write to an existing name must
//! carry its ID and keeps `CreateIndex`; a write without a state keeps the stored one (a new
//! row without one is `PENDING`); a peering marked for deletion (`DELETING`, `DeletedAt`)
//! takes no other write and is removed by a second command, so readers see it going.
//! Secrets ride on a peering write: generating a token replaces the establishment secret
//! (rotation: the earlier token stops working), exchanging it consumes it for a pending
//! stream secret (single use), and the dialer stores the active stream secret it was given.
//!
//! Watch keys: [`Table::Peerings`] by folded peering name (secrets announce their peering's
//! name; they are never read over HTTP), [`Table::PeeringTrustBundles`] by folded peer
//! name. Invariants: a row's key is its folded name and `by_id` maps every row's ID to that
//! key and nothing else; secrets exist only for a stored peering's ID; `create_index ≤
//! modify_index ≤` the table index.

use super::catalog::rows::fold;
use super::{Change, CommandResult, Table, Tables};
use imbl::OrdMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Longest peering name, in bytes: a DNS label, as Consul validates it.
pub const PEER_NAME_BYTES_MAX: usize = 63;
/// Most server addresses or CA certificates one peering may carry.
pub const PEER_LIST_ENTRIES_MAX: usize = 64;
/// Most peerings one cluster may hold: far more than any deployment, and a bound on what
/// writes can make every server store.
pub const PEERINGS_MAX: usize = 4096;

/// Consul's `PeeringState`, rendered in upper case.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeeringState {
    /// Not set on a write: keep the stored state (a new row is `Pending`).
    #[default]
    Undefined,
    Pending,
    Establishing,
    Active,
    Failing,
    Deleting,
    Terminated,
}

impl PeeringState {
    pub fn as_str(self) -> &'static str {
        match self {
            PeeringState::Undefined => "UNDEFINED",
            PeeringState::Pending => "PENDING",
            PeeringState::Establishing => "ESTABLISHING",
            PeeringState::Active => "ACTIVE",
            PeeringState::Failing => "FAILING",
            PeeringState::Deleting => "DELETING",
            PeeringState::Terminated => "TERMINATED",
        }
    }
}

/// What the peer stream reports about a peering (Consul computes it from its stream
/// tracker; praetor keeps it in the row so every server answers the same). Times are RFC
/// 3339 text stamped by the writer: this layer reads no clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamStatus {
    pub imported_services: Vec<String>,
    pub exported_services: Vec<String>,
    pub last_heartbeat: Option<String>,
    pub last_receive: Option<String>,
    pub last_send: Option<String>,
}

/// The other cluster's datacenter and partition, as its token named them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeeringRemote {
    pub datacenter: String,
    pub partition: String,
}

/// One peering.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peering {
    pub id: String,
    pub name: String,
    /// Always empty in CE (Consul writes `PartitionOrEmpty`).
    pub partition: String,
    pub meta: BTreeMap<String, String>,
    pub state: PeeringState,
    /// The ID the other side gave this relationship (a dialer's only).
    pub peer_id: String,
    pub peer_ca_pems: Vec<String>,
    pub peer_server_name: String,
    pub peer_server_addresses: Vec<String>,
    /// The token's `ManualServerAddresses` (the acceptor's `ServerExternalAddresses`).
    pub manual_server_addresses: Vec<String>,
    pub stream_status: StreamStatus,
    pub remote: PeeringRemote,
    /// When the peering was marked for deletion, RFC 3339.
    pub deleted_at: Option<String>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Peering {
    /// Consul's `ShouldDial`: a dialer is a peering that knows server addresses to dial.
    pub fn should_dial(&self) -> bool {
        !self.peer_server_addresses.is_empty() || !self.manual_server_addresses.is_empty()
    }

    /// Not marked for deletion (Consul's `IsActive`).
    pub fn is_active(&self) -> bool {
        self.deleted_at.is_none() && self.state != PeeringState::Terminated
    }
}

/// The secrets of one peering, by its (local) ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeeringSecrets {
    /// The acceptor's one-time secret from the newest token; on a dialer, the secret of the
    /// token it established with.
    pub establishment_secret: Option<String>,
    /// The acceptor's stream secret handed out for an exchanged token, not yet used.
    pub pending_stream_secret: Option<String>,
    /// The stream secret in use (both sides).
    pub active_stream_secret: Option<String>,
}

/// A write to a peering's secrets, carried by a peering write (Consul's
/// `SecretsWriteRequest`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecretsOp {
    /// A new token: its establishment secret replaces the previous one.
    GenerateToken { establishment_secret: String },
    /// The dialer's token was exchanged: the establishment secret must match, is consumed,
    /// and a pending stream secret takes its place.
    ExchangeSecret {
        establishment_secret: String,
        pending_stream_secret: String,
    },
    /// The dialer opened a stream with the pending secret: it becomes the active one.
    PromotePending { active_stream_secret: String },
    /// The dialer's side: the stream secret the acceptor gave it.
    Establish { active_stream_secret: String },
    /// The dialer's side: the establishment secret of the token it established with, kept
    /// so that the same token is refused if offered again (single use).
    Dialed { establishment_secret: String },
}

/// The root certificates a peer's services are verified with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustBundle {
    pub peer_name: String,
    pub trust_domain: String,
    pub root_pems: Vec<String>,
    pub export_partition: String,
    pub create_index: u64,
    pub modify_index: u64,
}

/// Writes to the peering tables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PeeringOp {
    Write {
        peering: Box<Peering>,
        secrets: Option<SecretsOp>,
    },
    /// Removes a peering marked for deletion, with its secrets and trust bundle.
    Remove {
        name: String,
    },
    TrustBundleWrite(Box<TrustBundle>),
    TrustBundleDelete {
        peer_name: String,
    },
}

/// The peering tables of one store version.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PeeringTables {
    /// Folded name → peering.
    pub peerings: OrdMap<String, Arc<Peering>>,
    /// Peering ID → folded name.
    pub by_id: OrdMap<String, String>,
    /// Peering ID → its secrets.
    pub secrets: OrdMap<String, Arc<PeeringSecrets>>,
    /// Folded peer name → trust bundle.
    pub trust_bundles: OrdMap<String, Arc<TrustBundle>>,
}

/// Why a peering write was refused, in Consul's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeeringError {
    MissingName,
    MissingId,
    NameTaken { name: String, id: String },
    IdTaken { id: String, name: String },
    MarkedForDeletion,
    NewMarkedForDeletion,
    DeletingWithoutTime,
    DeletedAtInState(PeeringState),
    TooMany,
    TooLong(&'static str),
    NotFound(String),
    NotMarkedForDeletion(String),
    NoSecretsFor(String),
    InvalidEstablishmentSecret,
    NoPendingSecret,
}

impl std::fmt::Display for PeeringError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeeringError::MissingName => write!(f, "Missing Peering Name"),
            PeeringError::MissingId => write!(f, "Missing Peering ID"),
            PeeringError::NameTaken { name, id } => write!(
                f,
                "A peering already exists with the name {name:?} and a different ID {id:?}"
            ),
            PeeringError::IdTaken { id, name } => write!(
                f,
                "A peering already exists with the ID {id:?} and a different name {name:?}"
            ),
            PeeringError::MarkedForDeletion => {
                write!(f, "cannot write to peering that is marked for deletion")
            }
            PeeringError::NewMarkedForDeletion => {
                write!(f, "cannot create a new peering marked for deletion")
            }
            PeeringError::DeletingWithoutTime => {
                write!(f, "Missing deletion time for peering in deleting state")
            }
            PeeringError::DeletedAtInState(state) => write!(
                f,
                "Unexpected deletion time for peering in state {}",
                state.as_str()
            ),
            PeeringError::TooMany => write!(f, "more than {PEERINGS_MAX} peerings"),
            PeeringError::TooLong(what) => {
                write!(f, "{what} has more than {PEER_LIST_ENTRIES_MAX} entries")
            }
            PeeringError::NotFound(name) => write!(f, "Peering not found for {name:?}"),
            PeeringError::NotMarkedForDeletion(name) => {
                write!(f, "peering {name:?} is not marked for deletion")
            }
            PeeringError::NoSecretsFor(id) => {
                write!(f, "no known peering secrets for peering {id:?}")
            }
            PeeringError::InvalidEstablishmentSecret => {
                write!(
                    f,
                    "invalid establishment secret: a new peering token must be generated"
                )
            }
            PeeringError::NoPendingSecret => write!(f, "no pending stream secret to promote"),
        }
    }
}

/// The peering named `name` (any letter case).
pub fn get<'t>(tables: &'t Tables, name: &str) -> Option<&'t Arc<Peering>> {
    tables.peering.peerings.get(fold(name).as_ref())
}

/// The peering with local ID `id`.
pub fn get_by_id<'t>(tables: &'t Tables, id: &str) -> Option<&'t Arc<Peering>> {
    let key = tables.peering.by_id.get(id)?;
    tables.peering.peerings.get(key)
}

/// Every peering, by folded name.
pub fn list(tables: &Tables) -> impl Iterator<Item = &Arc<Peering>> {
    tables.peering.peerings.values()
}

/// The secrets of the peering with local ID `id`.
pub fn secrets<'t>(tables: &'t Tables, id: &str) -> Option<&'t Arc<PeeringSecrets>> {
    tables.peering.secrets.get(id)
}

/// The trust bundle received from `peer_name`.
pub fn trust_bundle<'t>(tables: &'t Tables, peer_name: &str) -> Option<&'t Arc<TrustBundle>> {
    tables.peering.trust_bundles.get(fold(peer_name).as_ref())
}

/// The index a read of the peerings reports: the table's, so it never goes back.
pub fn index(tables: &Tables) -> u64 {
    tables.table_index(Table::Peerings)
}

pub(super) fn apply(
    tables: &mut Tables,
    index: u64,
    op: &PeeringOp,
    changes: &mut Vec<Change>,
) -> CommandResult {
    let outcome = match op {
        PeeringOp::Write { peering, secrets } => write(tables, index, peering, secrets.as_ref()),
        PeeringOp::Remove { name } => remove(tables, name),
        PeeringOp::TrustBundleWrite(bundle) => {
            write_trust_bundle(tables, index, bundle);
            Ok(Table::PeeringTrustBundles)
        }
        PeeringOp::TrustBundleDelete { peer_name } => {
            let key = fold(peer_name).into_owned();
            match tables.peering.trust_bundles.remove(&key) {
                Some(_) => Ok(Table::PeeringTrustBundles),
                None => return CommandResult::Bool(true),
            }
        }
    };
    match outcome {
        Ok(table) => {
            let key = match op {
                PeeringOp::Write { peering, .. } => fold(&peering.name).into_owned(),
                PeeringOp::Remove { name } => fold(name).into_owned(),
                PeeringOp::TrustBundleWrite(bundle) => fold(&bundle.peer_name).into_owned(),
                PeeringOp::TrustBundleDelete { peer_name } => fold(peer_name).into_owned(),
            };
            tables.bump_table(table, index);
            changes.push(Change::key(table, &Arc::<str>::from(key)));
            CommandResult::Bool(true)
        }
        Err(error) => CommandResult::Error(error.to_string()),
    }
}

/// Consul's checks on a peering write that do not depend on what is stored.
fn validate(peering: &Peering) -> Result<(), PeeringError> {
    if peering.name.is_empty() {
        return Err(PeeringError::MissingName);
    }
    if peering.id.is_empty() {
        return Err(PeeringError::MissingId);
    }
    if peering.state == PeeringState::Deleting && peering.deleted_at.is_none() {
        return Err(PeeringError::DeletingWithoutTime);
    }
    if peering.deleted_at.is_some() && peering.state != PeeringState::Deleting {
        return Err(PeeringError::DeletedAtInState(peering.state));
    }
    for (what, list) in [
        ("PeerServerAddresses", &peering.peer_server_addresses),
        ("ManualServerAddresses", &peering.manual_server_addresses),
        ("PeerCAPems", &peering.peer_ca_pems),
    ] {
        if list.len() > PEER_LIST_ENTRIES_MAX {
            return Err(PeeringError::TooLong(what));
        }
    }
    Ok(())
}

fn write(
    tables: &mut Tables,
    index: u64,
    peering: &Peering,
    secrets: Option<&SecretsOp>,
) -> Result<Table, PeeringError> {
    validate(peering)?;
    let key = fold(&peering.name).into_owned();
    let mut row = peering.clone();
    match tables.peering.peerings.get(&key) {
        Some(existing) => {
            if existing.id != row.id {
                return Err(PeeringError::NameTaken {
                    name: row.name,
                    id: existing.id.clone(),
                });
            }
            // Consul's rules: a peer's termination of a peering being deleted, or of one
            // already terminated, changes nothing; only a peering marked for deletion
            // refuses writes (a terminated one may still be marked for deletion).
            let terminating = row.state == PeeringState::Terminated;
            if terminating
                && matches!(
                    existing.state,
                    PeeringState::Deleting | PeeringState::Terminated
                )
            {
                return Ok(Table::Peerings);
            }
            if existing.state == PeeringState::Deleting || existing.deleted_at.is_some() {
                return Err(PeeringError::MarkedForDeletion);
            }
            if row.state == PeeringState::Undefined {
                row.state = existing.state;
            }
            if row.remote == PeeringRemote::default() {
                row.remote = existing.remote.clone();
            }
            row.create_index = existing.create_index;
        }
        None => {
            if let Some(other) = tables.peering.by_id.get(&row.id) {
                let name = tables
                    .peering
                    .peerings
                    .get(other)
                    .map(|p| p.name.clone())
                    .unwrap_or_default();
                return Err(PeeringError::IdTaken { id: row.id, name });
            }
            if !row.is_active() {
                return Err(PeeringError::NewMarkedForDeletion);
            }
            if tables.peering.peerings.len() >= PEERINGS_MAX {
                return Err(PeeringError::TooMany);
            }
            if row.state == PeeringState::Undefined {
                row.state = PeeringState::Pending;
            }
            row.create_index = index;
        }
    }
    row.modify_index = index;
    // Secrets first: a refused exchange leaves the peering as it was.
    if let Some(op) = secrets {
        let current = tables.peering.secrets.get(&row.id).map(|s| (**s).clone());
        let updated = write_secrets(current, op, &row.id)?;
        tables
            .peering
            .secrets
            .insert(row.id.clone(), Arc::new(updated));
    }
    tables.peering.by_id.insert(row.id.clone(), key.clone());
    tables.peering.peerings.insert(key, Arc::new(row));
    Ok(Table::Peerings)
}

/// The secrets after `op`, or why it is refused.
fn write_secrets(
    current: Option<PeeringSecrets>,
    op: &SecretsOp,
    id: &str,
) -> Result<PeeringSecrets, PeeringError> {
    let mut secrets = current.clone().unwrap_or_default();
    match op {
        SecretsOp::GenerateToken {
            establishment_secret,
        } => secrets.establishment_secret = Some(establishment_secret.clone()),
        SecretsOp::ExchangeSecret {
            establishment_secret,
            pending_stream_secret,
        } => {
            if current.is_none() {
                return Err(PeeringError::NoSecretsFor(id.to_string()));
            }
            if secrets.establishment_secret.as_deref() != Some(establishment_secret.as_str()) {
                return Err(PeeringError::InvalidEstablishmentSecret);
            }
            secrets.establishment_secret = None;
            secrets.pending_stream_secret = Some(pending_stream_secret.clone());
        }
        SecretsOp::PromotePending {
            active_stream_secret,
        } => {
            if secrets.pending_stream_secret.as_deref() != Some(active_stream_secret.as_str()) {
                return Err(PeeringError::NoPendingSecret);
            }
            secrets.pending_stream_secret = None;
            secrets.active_stream_secret = Some(active_stream_secret.clone());
        }
        SecretsOp::Establish {
            active_stream_secret,
        } => secrets.active_stream_secret = Some(active_stream_secret.clone()),
        SecretsOp::Dialed {
            establishment_secret,
        } => secrets.establishment_secret = Some(establishment_secret.clone()),
    }
    Ok(secrets)
}

fn remove(tables: &mut Tables, name: &str) -> Result<Table, PeeringError> {
    let key = fold(name).into_owned();
    let Some(existing) = tables.peering.peerings.get(&key).cloned() else {
        return Err(PeeringError::NotFound(name.to_string()));
    };
    if existing.state != PeeringState::Deleting {
        return Err(PeeringError::NotMarkedForDeletion(name.to_string()));
    }
    tables.peering.peerings.remove(&key);
    tables.peering.by_id.remove(&existing.id);
    tables.peering.secrets.remove(&existing.id);
    // The trust bundle received from the peer is the peer stream's to delete once it
    // exchanges bundles (docs/peering.md), as Consul's leader deletes it while it tears the
    // peering down.
    Ok(Table::Peerings)
}

fn write_trust_bundle(tables: &mut Tables, index: u64, bundle: &TrustBundle) {
    let key = fold(&bundle.peer_name).into_owned();
    let mut row = bundle.clone();
    row.create_index = tables
        .peering
        .trust_bundles
        .get(&key)
        .map_or(index, |old| old.create_index);
    row.modify_index = index;
    tables.peering.trust_bundles.insert(key, Arc::new(row));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ChangeKey, Command};

    fn acceptor(name: &str, id: &str) -> Peering {
        Peering {
            id: id.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    fn write_cmd(peering: Peering, secrets: Option<SecretsOp>) -> Command {
        Command::Peering(PeeringOp::Write {
            peering: Box::new(peering),
            secrets,
        })
    }

    fn generate(secret: &str) -> Option<SecretsOp> {
        Some(SecretsOp::GenerateToken {
            establishment_secret: secret.into(),
        })
    }

    #[test]
    fn a_new_peering_is_pending_and_a_rewrite_keeps_state_and_create_index() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let result = tables.apply(
            4,
            &write_cmd(acceptor("Web", "id-1"), generate("s1")),
            &mut changes,
        );
        assert_eq!(result, CommandResult::Bool(true));
        let row = get(&tables, "web").unwrap();
        assert_eq!(row.state, PeeringState::Pending);
        assert_eq!((row.create_index, row.modify_index), (4, 4));
        assert_eq!(get_by_id(&tables, "id-1").unwrap().name, "Web");
        assert_eq!(index(&tables), 4);
        assert_eq!(
            changes,
            vec![Change {
                table: Table::Peerings,
                key: ChangeKey::Key(Arc::from("web")),
            }]
        );
        let mut active = acceptor("web", "id-1");
        active.state = PeeringState::Active;
        tables.apply(5, &write_cmd(active, None), &mut changes);
        tables.apply(6, &write_cmd(acceptor("web", "id-1"), None), &mut changes);
        let row = get(&tables, "WEB").unwrap();
        assert_eq!(
            row.state,
            PeeringState::Active,
            "an undefined state keeps the stored one"
        );
        assert_eq!((row.create_index, row.modify_index), (4, 6));
    }

    #[test]
    fn names_and_ids_are_unique() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        tables.apply(2, &write_cmd(acceptor("a", "id-1"), None), &mut changes);
        changes.clear();
        let refused = tables.apply(3, &write_cmd(acceptor("A", "id-2"), None), &mut changes);
        assert_eq!(
            refused,
            CommandResult::Error(
                "A peering already exists with the name \"A\" and a different ID \"id-1\"".into()
            )
        );
        let refused = tables.apply(4, &write_cmd(acceptor("b", "id-1"), None), &mut changes);
        assert_eq!(
            refused,
            CommandResult::Error(
                "A peering already exists with the ID \"id-1\" and a different name \"a\"".into()
            )
        );
        let refused = tables.apply(5, &write_cmd(acceptor("", "id-3"), None), &mut changes);
        assert_eq!(refused, CommandResult::Error("Missing Peering Name".into()));
        assert!(changes.is_empty());
        assert_eq!(index(&tables), 2);
    }

    #[test]
    fn tokens_rotate_and_an_exchange_consumes_the_secret_once() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        tables.apply(
            2,
            &write_cmd(acceptor("a", "id-1"), generate("old")),
            &mut changes,
        );
        tables.apply(
            3,
            &write_cmd(acceptor("a", "id-1"), generate("new")),
            &mut changes,
        );
        let exchange = |secret: &str| {
            write_cmd(
                acceptor("a", "id-1"),
                Some(SecretsOp::ExchangeSecret {
                    establishment_secret: secret.into(),
                    pending_stream_secret: "stream".into(),
                }),
            )
        };
        let refused = tables.apply(4, &exchange("old"), &mut changes);
        assert!(
            matches!(&refused, CommandResult::Error(e) if e.starts_with("invalid establishment secret")),
            "{refused:?}"
        );
        assert_eq!(
            tables.apply(5, &exchange("new"), &mut changes),
            CommandResult::Bool(true)
        );
        let held = secrets(&tables, "id-1").unwrap();
        assert_eq!(held.establishment_secret, None);
        assert_eq!(held.pending_stream_secret.as_deref(), Some("stream"));
        assert!(matches!(
            tables.apply(6, &exchange("new"), &mut changes),
            CommandResult::Error(_)
        ));
        let promote = write_cmd(
            acceptor("a", "id-1"),
            Some(SecretsOp::PromotePending {
                active_stream_secret: "stream".into(),
            }),
        );
        assert_eq!(
            tables.apply(7, &promote, &mut changes),
            CommandResult::Bool(true)
        );
        let held = secrets(&tables, "id-1").unwrap();
        assert_eq!(held.active_stream_secret.as_deref(), Some("stream"));
        assert_eq!(held.pending_stream_secret, None);
    }

    #[test]
    fn deletion_marks_then_removes_and_a_marked_peering_takes_no_other_write() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        tables.apply(
            2,
            &write_cmd(acceptor("a", "id-1"), generate("s")),
            &mut changes,
        );
        let remove = Command::Peering(PeeringOp::Remove { name: "a".into() });
        assert!(matches!(
            tables.apply(3, &remove, &mut changes),
            CommandResult::Error(_)
        ));
        let mut marked = acceptor("a", "id-1");
        marked.state = PeeringState::Deleting;
        let refused = tables.apply(4, &write_cmd(marked.clone(), None), &mut changes);
        assert_eq!(
            refused,
            CommandResult::Error("Missing deletion time for peering in deleting state".into())
        );
        marked.deleted_at = Some("2026-12-06T21:00:00Z".into());
        assert_eq!(
            tables.apply(5, &write_cmd(marked, None), &mut changes),
            CommandResult::Bool(true)
        );
        assert_eq!(get(&tables, "a").unwrap().state, PeeringState::Deleting);
        let refused = tables.apply(6, &write_cmd(acceptor("a", "id-1"), None), &mut changes);
        assert_eq!(
            refused,
            CommandResult::Error("cannot write to peering that is marked for deletion".into())
        );
        changes.clear();
        assert_eq!(
            tables.apply(7, &remove, &mut changes),
            CommandResult::Bool(true)
        );
        assert!(get(&tables, "a").is_none());
        assert!(get_by_id(&tables, "id-1").is_none());
        assert!(secrets(&tables, "id-1").is_none());
        assert_eq!(changes.len(), 1);
        assert_eq!(index(&tables), 7);
    }

    #[test]
    fn trust_bundles_are_written_and_deleted() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let bundle = TrustBundle {
            peer_name: "Dc2".into(),
            trust_domain: "abc.consul".into(),
            root_pems: vec!["PEM".into()],
            ..Default::default()
        };
        tables.apply(
            3,
            &Command::Peering(PeeringOp::TrustBundleWrite(Box::new(bundle))),
            &mut changes,
        );
        let held = trust_bundle(&tables, "dc2").unwrap();
        assert_eq!((held.create_index, held.modify_index), (3, 3));
        assert_eq!(tables.table_index(Table::PeeringTrustBundles), 3);
        let delete = Command::Peering(PeeringOp::TrustBundleDelete {
            peer_name: "dc2".into(),
        });
        tables.apply(4, &delete, &mut changes);
        assert!(trust_bundle(&tables, "dc2").is_none());
        changes.clear();
        tables.apply(5, &delete, &mut changes);
        assert!(
            changes.is_empty(),
            "deleting a missing bundle changes nothing"
        );
    }

    #[test]
    fn peerings_survive_a_snapshot() {
        let mut tables = Tables::default();
        let mut dialer = acceptor("dc2", "id-9");
        dialer.state = PeeringState::Establishing;
        dialer.peer_id = "remote-id".into();
        dialer.peer_server_addresses = vec!["127.0.0.2:8503".into()];
        dialer.meta.insert("env".into(), "test".into());
        let establish = Some(SecretsOp::Establish {
            active_stream_secret: "x".into(),
        });
        tables.apply(9, &write_cmd(dialer, establish), &mut Vec::new());
        let restored = Tables::from_snapshot_bytes(&tables.to_snapshot_bytes()).unwrap();
        assert_eq!(get(&restored, "dc2"), get(&tables, "dc2"));
        assert_eq!(get_by_id(&restored, "id-9").unwrap().peer_id, "remote-id");
        assert_eq!(secrets(&restored, "id-9"), secrets(&tables, "id-9"));
        assert_eq!(index(&restored), 9);
    }
}
