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
//! Imported services (Consul keeps them in its catalog with a `PeerName`; praetor keeps
//! them apart, so no local read can mistake them for local rows): what a peer exported to
//! this cluster, one row per (peer, service) holding the `CheckServiceNode`s as the peer
//! sent them. The peer stream writes a service's whole instance list at once (an empty
//! list removes it) and prunes what a new exported-service list no longer names; removing
//! a peering, or its termination by the peer, removes its imports.
//!
//! Watch keys: [`Table::Peerings`] by folded peering name (secrets announce their peering's
//! name; they are never read over HTTP), [`Table::PeeringTrustBundles`] by folded peer
//! name, [`Table::ImportedServices`] by folded peer name. Invariants: a row's key is its
//! folded name and `by_id` maps every row's ID to that key and nothing else; secrets exist
//! only for a stored peering's ID; imports exist only under a stored, active peering's
//! folded name, never empty, within [`IMPORTED_SERVICES_PER_PEERING_MAX`] and
//! [`IMPORTED_INSTANCES_PER_PEERING_MAX`]; `create_index ≤ modify_index ≤` the table index.

use super::catalog::rows::fold;
use super::catalog::{HealthCheck, Node, ServiceInstance};
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
/// Most services one peer may export to this cluster (more are refused, and the peer stream
/// answers the resource with a NACK): a bound on what one peer can make every server store.
pub const IMPORTED_SERVICES_PER_PEERING_MAX: usize = 5_000;
/// Most service instances (`CheckServiceNode`s) imported from one peer, over all its
/// services.
pub const IMPORTED_INSTANCES_PER_PEERING_MAX: usize = 50_000;
/// Most checks one imported instance may carry.
pub const IMPORTED_CHECKS_PER_INSTANCE_MAX: usize = 256;

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

/// One instance of an imported service, as the peer sent it (Consul's `CheckServiceNode`);
/// the rows' indexes are this cluster's, set when the instance was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedInstance {
    pub node: Node,
    pub service: ServiceInstance,
    pub checks: Vec<HealthCheck>,
}

impl ImportedInstance {
    /// Whether every check of the instance passes (Consul's `?passing`).
    pub fn all_passing(&self) -> bool {
        self.checks
            .iter()
            .all(|c| c.status == super::catalog::Status::Passing)
    }
}

/// What one peer exports to this cluster of one service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedService {
    /// The local name of the peering it came through.
    pub peer_name: String,
    pub service: String,
    pub instances: Vec<ImportedInstance>,
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
    /// The instances peer `peer_name` exports of `service` now (none: it no longer exports
    /// it). Refused for a peering that does not exist or is being deleted or terminated.
    Import {
        peer_name: String,
        service: String,
        instances: Vec<ImportedInstance>,
    },
    /// The services peer `peer_name` exports now: the imports of any other are removed.
    ImportList {
        peer_name: String,
        services: Vec<String>,
    },
}

/// Folded peer name → service name → what that peer exports of it.
pub type Imports = OrdMap<String, OrdMap<String, Arc<ImportedService>>>;

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
    /// What each peer exports to this cluster (format 5 on: older snapshots restore with
    /// none, and the peer stream sends them again).
    #[serde(default)]
    pub imports: Imports,
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
    MissingServiceName,
    ImportsTooMany(&'static str, usize),
    ImportedInstanceInvalid(String),
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
            PeeringError::MissingServiceName => write!(f, "Missing service name"),
            PeeringError::ImportsTooMany(what, max) => {
                write!(f, "a peer may export at most {max} {what} to this cluster")
            }
            PeeringError::ImportedInstanceInvalid(why) => {
                write!(f, "invalid imported instance: {why}")
            }
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

/// What peer `peer_name` exports to this cluster of `service`.
pub fn imported<'t>(
    tables: &'t Tables,
    peer_name: &str,
    service: &str,
) -> Option<&'t Arc<ImportedService>> {
    tables
        .peering
        .imports
        .get(fold(peer_name).as_ref())?
        .get(service)
}

/// Every service peer `peer_name` exports to this cluster, by name.
pub fn imported_services<'t>(
    tables: &'t Tables,
    peer_name: &str,
) -> impl Iterator<Item = &'t Arc<ImportedService>> {
    tables
        .peering
        .imports
        .get(fold(peer_name).as_ref())
        .into_iter()
        .flat_map(|services| services.values())
}

/// The index a read of imported services reports: the imports table's, so it never goes
/// back (at least 1, as Consul's reads never answer 0).
pub fn imports_index(tables: &Tables) -> u64 {
    tables.table_index(Table::ImportedServices).max(1)
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
        PeeringOp::Import {
            peer_name,
            service,
            instances,
        } => match import(tables, index, peer_name, service, instances) {
            Ok(true) => Ok(Table::ImportedServices),
            Ok(false) => return CommandResult::Bool(true),
            Err(error) => Err(error),
        },
        PeeringOp::ImportList {
            peer_name,
            services,
        } => match import_list(tables, peer_name, services) {
            Ok(true) => Ok(Table::ImportedServices),
            Ok(false) => return CommandResult::Bool(true),
            Err(error) => Err(error),
        },
    };
    match outcome {
        Ok(table) => {
            let key = match op {
                PeeringOp::Write { peering, .. } => fold(&peering.name).into_owned(),
                PeeringOp::Remove { name } => fold(name).into_owned(),
                PeeringOp::TrustBundleWrite(bundle) => fold(&bundle.peer_name).into_owned(),
                PeeringOp::TrustBundleDelete { peer_name } => fold(peer_name).into_owned(),
                PeeringOp::Import { peer_name, .. } | PeeringOp::ImportList { peer_name, .. } => {
                    fold(peer_name).into_owned()
                }
            };
            let key = Arc::<str>::from(key);
            tables.bump_table(table, index);
            changes.push(Change::key(table, &key));
            // A peering removed or terminated takes its imports along: their readers wake.
            if table == Table::Peerings && drop_imports_unless_active(tables, &key) {
                tables.bump_table(Table::ImportedServices, index);
                changes.push(Change::key(Table::ImportedServices, &key));
            }
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

/// Removes the imports of the peering under folded name `key` unless it exists and is
/// active; whether there were any.
fn drop_imports_unless_active(tables: &mut Tables, key: &str) -> bool {
    let active = tables
        .peering
        .peerings
        .get(key)
        .is_some_and(|p| p.is_active());
    !active && tables.peering.imports.remove(key).is_some()
}

/// The instances' count over all services of `peer`, leaving out `except`.
fn instances_of(services: &OrdMap<String, Arc<ImportedService>>, except: &str) -> usize {
    services
        .iter()
        .filter(|(name, _)| name.as_str() != except)
        .map(|(_, s)| s.instances.len())
        .sum()
}

/// Writes what `peer_name` exports of `service`; whether anything changed.
fn import(
    tables: &mut Tables,
    index: u64,
    peer_name: &str,
    service: &str,
    instances: &[ImportedInstance],
) -> Result<bool, PeeringError> {
    let key = fold(peer_name).into_owned();
    let peering = tables
        .peering
        .peerings
        .get(&key)
        .filter(|p| p.is_active())
        .ok_or_else(|| PeeringError::NotFound(peer_name.to_string()))?;
    let peer_name = peering.name.clone();
    if service.is_empty() {
        return Err(PeeringError::MissingServiceName);
    }
    for instance in instances {
        if instance.service.name != service {
            return Err(PeeringError::ImportedInstanceInvalid(format!(
                "an instance of {:?} in the resource of {service:?}",
                &*instance.service.name
            )));
        }
        if instance.node.name.is_empty() || instance.service.id.is_empty() {
            return Err(PeeringError::ImportedInstanceInvalid(
                "an instance without a node name or service ID".to_string(),
            ));
        }
        if instance.checks.len() > IMPORTED_CHECKS_PER_INSTANCE_MAX {
            return Err(PeeringError::ImportsTooMany(
                "checks per instance",
                IMPORTED_CHECKS_PER_INSTANCE_MAX,
            ));
        }
    }
    let mut services = tables
        .peering
        .imports
        .get(&key)
        .cloned()
        .unwrap_or_default();
    let existing = services.get(service).cloned();
    if instances.is_empty() {
        if existing.is_none() {
            return Ok(false);
        }
        services.remove(service);
    } else {
        if existing.is_none() && services.len() >= IMPORTED_SERVICES_PER_PEERING_MAX {
            return Err(PeeringError::ImportsTooMany(
                "services",
                IMPORTED_SERVICES_PER_PEERING_MAX,
            ));
        }
        if instances_of(&services, service) + instances.len() > IMPORTED_INSTANCES_PER_PEERING_MAX {
            return Err(PeeringError::ImportsTooMany(
                "service instances",
                IMPORTED_INSTANCES_PER_PEERING_MAX,
            ));
        }
        // The rows carry this cluster's indexes: an unchanged instance keeps its own, so a
        // re-sent list moves only what moved.
        let stamped = instances
            .iter()
            .map(|instance| stamp(instance, existing.as_deref(), index))
            .collect::<Vec<_>>();
        if existing
            .as_ref()
            .is_some_and(|old| old.instances == stamped)
        {
            return Ok(false);
        }
        let row = ImportedService {
            peer_name,
            service: service.to_string(),
            instances: stamped,
            create_index: existing.as_ref().map_or(index, |old| old.create_index),
            modify_index: index,
        };
        services.insert(service.to_string(), Arc::new(row));
    }
    if services.is_empty() {
        tables.peering.imports.remove(&key);
    } else {
        tables.peering.imports.insert(key, services);
    }
    Ok(true)
}

/// `instance` with this cluster's indexes: those of the same instance before when nothing
/// in it changed, else `index` (the create index kept when the instance existed).
fn stamp(
    instance: &ImportedInstance,
    before: Option<&ImportedService>,
    index: u64,
) -> ImportedInstance {
    let old = before.and_then(|b| {
        b.instances
            .iter()
            .find(|o| o.node.name == instance.node.name && o.service.id == instance.service.id)
    });
    let mut row = instance.clone();
    let created = old.map_or(index, |o| o.service.create_index);
    row.node.create_index = old.map_or(index, |o| o.node.create_index);
    row.node.modify_index = match old {
        Some(o) if o.node.same_as(&row.node) => o.node.modify_index,
        _ => index,
    };
    row.service.create_index = created;
    row.service.modify_index = match old {
        Some(o) if o.service.same_as(&row.service) => o.service.modify_index,
        _ => index,
    };
    for check in &mut row.checks {
        let previous = old.and_then(|o| o.checks.iter().find(|c| c.check_id == check.check_id));
        check.create_index = previous.map_or(index, |c| c.create_index);
        check.modify_index = match previous {
            Some(c) if c.same_as(check) => c.modify_index,
            _ => index,
        };
    }
    row
}

/// Keeps only the imports of `peer_name` that `services` names; whether any went.
fn import_list(
    tables: &mut Tables,
    peer_name: &str,
    services: &[String],
) -> Result<bool, PeeringError> {
    let key = fold(peer_name).into_owned();
    if !tables
        .peering
        .peerings
        .get(&key)
        .is_some_and(|p| p.is_active())
    {
        return Err(PeeringError::NotFound(peer_name.to_string()));
    }
    if services.len() > IMPORTED_SERVICES_PER_PEERING_MAX {
        return Err(PeeringError::ImportsTooMany(
            "services",
            IMPORTED_SERVICES_PER_PEERING_MAX,
        ));
    }
    let Some(held) = tables.peering.imports.get(&key) else {
        return Ok(false);
    };
    let kept: OrdMap<String, Arc<ImportedService>> = held
        .iter()
        .filter(|(name, _)| services.iter().any(|s| s == *name))
        .map(|(name, row)| (name.clone(), row.clone()))
        .collect();
    if kept.len() == held.len() {
        return Ok(false);
    }
    if kept.is_empty() {
        tables.peering.imports.remove(&key);
    } else {
        tables.peering.imports.insert(key, kept);
    }
    Ok(true)
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

    fn instance(node: &str, id: &str, status: crate::store::catalog::Status) -> ImportedInstance {
        use crate::store::catalog::{StrMap, Weights};
        use arcstr::ArcStr;
        ImportedInstance {
            node: Node {
                id: ArcStr::new(),
                name: ArcStr::from(node),
                address: ArcStr::from("10.0.0.1"),
                datacenter: ArcStr::from("dc1"),
                tagged_addresses: StrMap::default(),
                meta: StrMap::default(),
                create_index: 0,
                modify_index: 0,
            },
            service: ServiceInstance {
                node: ArcStr::from(node),
                id: ArcStr::from(id),
                name: ArcStr::from("web"),
                tags: Default::default(),
                address: ArcStr::new(),
                meta: StrMap::default(),
                port: 80,
                weights: Weights::default(),
                enable_tag_override: false,
                extras: None,
                create_index: 0,
                modify_index: 0,
            },
            checks: vec![HealthCheck {
                node: ArcStr::from(node),
                check_id: ArcStr::from("c"),
                name: ArcStr::from("c"),
                status,
                kind_code: 0,
                output: ArcStr::new(),
                service_id: ArcStr::from(id),
                service_name: ArcStr::from("web"),
                service_tags: Default::default(),
                extras: None,
                create_index: 0,
                modify_index: 0,
            }],
        }
    }

    fn import_cmd(peer: &str, service: &str, instances: Vec<ImportedInstance>) -> Command {
        Command::Peering(PeeringOp::Import {
            peer_name: peer.into(),
            service: service.into(),
            instances,
        })
    }

    #[test]
    fn imports_are_written_whole_restamped_only_when_changed_and_pruned_by_the_list() {
        use crate::store::catalog::Status;
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        tables.apply(2, &write_cmd(acceptor("Dc2", "id-1"), None), &mut changes);
        changes.clear();
        let web = vec![instance("n1", "web-1", Status::Passing)];
        assert_eq!(
            tables.apply(3, &import_cmd("dc2", "web", web.clone()), &mut changes),
            CommandResult::Bool(true)
        );
        assert_eq!(
            changes,
            vec![Change::key(Table::ImportedServices, &Arc::from("dc2"))]
        );
        assert_eq!(imports_index(&tables), 3);
        let row = imported(&tables, "DC2", "web").unwrap();
        assert_eq!(row.peer_name, "Dc2", "the peering's own spelling");
        assert_eq!(row.instances[0].checks[0].modify_index, 3);
        // The same instances again change nothing.
        changes.clear();
        tables.apply(4, &import_cmd("dc2", "web", web), &mut changes);
        assert!(changes.is_empty());
        assert_eq!(imports_index(&tables), 3);
        // A health flip moves the check's index, not the node's.
        tables.apply(
            5,
            &import_cmd(
                "dc2",
                "web",
                vec![instance("n1", "web-1", Status::Critical)],
            ),
            &mut changes,
        );
        let row = imported(&tables, "dc2", "web").unwrap();
        assert_eq!(row.instances[0].checks[0].status, Status::Critical);
        assert_eq!(row.instances[0].checks[0].modify_index, 5);
        assert_eq!(row.instances[0].node.modify_index, 3);
        assert_eq!((row.create_index, row.modify_index), (3, 5));
        let mut api = instance("n2", "api-1", Status::Passing);
        api.service.name = "api".into();
        tables.apply(6, &import_cmd("dc2", "api", vec![api]), &mut changes);
        let names: Vec<String> = imported_services(&tables, "dc2")
            .map(|s| s.service.clone())
            .collect();
        assert_eq!(names, ["api", "web"]);
        // The list prunes; an empty instance list removes.
        let list = Command::Peering(PeeringOp::ImportList {
            peer_name: "dc2".into(),
            services: vec!["web".into()],
        });
        tables.apply(7, &list, &mut changes);
        assert!(imported(&tables, "dc2", "api").is_none());
        tables.apply(8, &import_cmd("dc2", "web", Vec::new()), &mut changes);
        assert_eq!(imported_services(&tables, "dc2").count(), 0);
        assert!(tables.peering.imports.is_empty());
        assert_eq!(imports_index(&tables), 8);
    }

    #[test]
    fn imports_are_refused_for_unknown_peerings_wrong_instances_and_over_the_limits() {
        use crate::store::catalog::Status;
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        let refused = tables.apply(
            2,
            &import_cmd("nope", "web", vec![instance("n", "w", Status::Passing)]),
            &mut changes,
        );
        assert_eq!(
            refused,
            CommandResult::Error("Peering not found for \"nope\"".into())
        );
        tables.apply(3, &write_cmd(acceptor("dc2", "id-1"), None), &mut changes);
        let mut other = instance("n", "w", Status::Passing);
        other.service.name = "api".into();
        assert!(matches!(
            tables.apply(4, &import_cmd("dc2", "web", vec![other]), &mut changes),
            CommandResult::Error(_)
        ));
        let many: Vec<ImportedInstance> = (0..=IMPORTED_INSTANCES_PER_PEERING_MAX)
            .map(|i| instance("n", &format!("w{i}"), Status::Passing))
            .collect();
        let refused = tables.apply(5, &import_cmd("dc2", "web", many), &mut changes);
        assert_eq!(
            refused,
            CommandResult::Error(format!(
                "a peer may export at most {IMPORTED_INSTANCES_PER_PEERING_MAX} service instances to this cluster"
            ))
        );
        assert!(tables.peering.imports.is_empty());
    }

    #[test]
    fn deleting_or_terminating_a_peering_drops_its_imports_and_wakes_their_readers() {
        use crate::store::catalog::Status;
        for state in [PeeringState::Deleting, PeeringState::Terminated] {
            let mut tables = Tables::default();
            let mut changes = Vec::new();
            tables.apply(2, &write_cmd(acceptor("dc2", "id-1"), None), &mut changes);
            tables.apply(
                3,
                &import_cmd("dc2", "web", vec![instance("n", "w", Status::Passing)]),
                &mut changes,
            );
            let mut row = acceptor("dc2", "id-1");
            row.state = state;
            if state == PeeringState::Deleting {
                row.deleted_at = Some("2026-12-08T00:00:00Z".into());
            }
            changes.clear();
            assert_eq!(
                tables.apply(4, &write_cmd(row, None), &mut changes),
                CommandResult::Bool(true)
            );
            assert!(imported(&tables, "dc2", "web").is_none(), "{state:?}");
            assert!(changes.contains(&Change::key(Table::ImportedServices, &Arc::from("dc2"))));
            assert_eq!(imports_index(&tables), 4);
            // And nothing more is imported through it.
            assert!(matches!(
                tables.apply(
                    5,
                    &import_cmd("dc2", "web", vec![instance("n", "w", Status::Passing)]),
                    &mut changes
                ),
                CommandResult::Error(_)
            ));
        }
    }

    #[test]
    fn imports_survive_a_snapshot() {
        use crate::store::catalog::Status;
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        tables.apply(2, &write_cmd(acceptor("dc2", "id-1"), None), &mut changes);
        tables.apply(
            3,
            &import_cmd("dc2", "web", vec![instance("n", "w", Status::Warning)]),
            &mut changes,
        );
        let restored = Tables::from_snapshot_bytes(&tables.to_snapshot_bytes()).unwrap();
        assert_eq!(
            imported(&restored, "dc2", "web"),
            imported(&tables, "dc2", "web")
        );
        assert_eq!(imports_index(&restored), 3);
    }
}
