//! The built-in Connect CA's replicated state: its configuration and its trusted roots.
//!
//! The leader makes every key and certificate (entropy and the clock live outside this
//! layer) and proposes them here; every server stores the same bytes. Each root carries its
//! signing key so that any server can sign a leaf certificate; the key never leaves the
//! servers (`/v1/connect/ca/roots` renders roots without it).
//!
//! Rotation (`PUT /v1/connect/ca/configuration` with a new key or key type): the new root
//! arrives with an intermediate certificate — the new root's subject and key, signed by the
//! old root's key — so a peer that still trusts only the old root verifies leaves of the new
//! one; the old root stays in the trusted list, rotated out, so leaves it signed keep
//! verifying until they expire and the leader prunes it.
//!
//! Watch keys ([`Table::ConnectCa`]): [`ROOTS_WATCH_KEY`] when the roots change,
//! [`CONFIG_WATCH_KEY`] when the configuration does.

use crate::store::{Change, ChangeKey, CommandResult, Table, Tables};
use arcstr::ArcStr;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub const ROOTS_WATCH_KEY: &str = "roots";
pub const CONFIG_WATCH_KEY: &str = "config";

/// The CA provider praetor implements (Consul's built-in one).
pub const PROVIDER_CONSUL: &str = "consul";

/// The CA configuration in force.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaConfig {
    /// The cluster's ID; the trust domain is `<cluster_id>.consul`.
    pub cluster_id: ArcStr,
    pub provider: ArcStr,
    /// `Config` as a compact JSON object, defaults filled in.
    pub config_json: ArcStr,
    pub force_without_cross_signing: bool,
    pub create_index: u64,
    pub modify_index: u64,
}

impl CaConfig {
    /// The SPIFFE trust domain of certificates this CA issues.
    pub fn trust_domain(&self) -> String {
        format!("{}.consul", self.cluster_id)
    }
}

/// One trusted root (Consul's `CARoot`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaRoot {
    /// The SHA-1 fingerprint of the root certificate, colon-separated hex.
    pub id: ArcStr,
    pub name: ArcStr,
    pub serial_number: u64,
    /// The signing key's subject key ID, colon-separated hex.
    pub signing_key_id: ArcStr,
    /// The trust domain the root was made under.
    pub external_trust_domain: ArcStr,
    pub not_before_unix_s: i64,
    pub not_after_unix_s: i64,
    pub root_cert_pem: ArcStr,
    /// Sent along with every leaf this root signs (the cross-signed certificate after a
    /// rotation).
    pub intermediate_certs: Vec<ArcStr>,
    /// PKCS#8 PEM of the key that signs leaves. Secret: never rendered.
    pub signing_key_pem: ArcStr,
    pub active: bool,
    /// When it stopped being the active root (the proposing leader's clock).
    pub rotated_out_at_ms: Option<u64>,
    pub private_key_type: ArcStr,
    pub private_key_bits: u32,
    pub create_index: u64,
    pub modify_index: u64,
}

/// The CA tables of one store version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaState {
    /// `None` until the leader initializes the CA.
    pub config: Option<Arc<CaConfig>>,
    /// Trusted roots, oldest first; exactly one active once initialized.
    pub roots: Vec<Arc<CaRoot>>,
}

impl CaState {
    pub fn active_root(&self) -> Option<&Arc<CaRoot>> {
        self.roots.iter().find(|r| r.active)
    }

    /// The trust domain, once the CA is initialized.
    pub fn trust_domain(&self) -> Option<String> {
        self.config.as_ref().map(|c| c.trust_domain())
    }
}

/// A write to the CA state, made by the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CaOp {
    /// The first configuration and root; refused (`false`) once a configuration exists, so
    /// two leaders racing to initialize leave one CA.
    Initialize {
        config: Box<CaConfig>,
        root: Box<CaRoot>,
    },
    /// A new configuration, and with `new_root` a rotation to it. `expected_active_root`
    /// is the root the proposer rotated from: a rotation over a root that changed since is
    /// refused.
    SetConfig {
        config: Box<CaConfig>,
        new_root: Option<Box<CaRoot>>,
        expected_active_root: String,
    },
    /// Drops rotated-out roots whose certificates expired by `now_unix_s`.
    PruneRoots { now_unix_s: i64 },
}

fn announce(changes: &mut Vec<Change>, key: &str) {
    changes.push(Change {
        table: Table::ConnectCa,
        key: ChangeKey::Key(Arc::from(key)),
    });
}

fn stamped(config: &CaConfig, create_index: u64, index: u64) -> Arc<CaConfig> {
    Arc::new(CaConfig {
        create_index,
        modify_index: index,
        ..config.clone()
    })
}

fn stamped_root(root: &CaRoot, index: u64) -> Arc<CaRoot> {
    Arc::new(CaRoot {
        active: true,
        rotated_out_at_ms: None,
        create_index: index,
        modify_index: index,
        ..root.clone()
    })
}

/// Applies one CA write at `index`.
pub(crate) fn apply(
    tables: &mut Tables,
    index: u64,
    op: &CaOp,
    changes: &mut Vec<Change>,
) -> CommandResult {
    let before = changes.len();
    let result = match op {
        CaOp::Initialize { config, root } => {
            if tables.mesh.ca.config.is_some() {
                return CommandResult::Bool(false);
            }
            tables.mesh.ca.config = Some(stamped(config, index, index));
            tables.mesh.ca.roots = vec![stamped_root(root, index)];
            announce(changes, CONFIG_WATCH_KEY);
            announce(changes, ROOTS_WATCH_KEY);
            CommandResult::Bool(true)
        }
        CaOp::SetConfig {
            config,
            new_root,
            expected_active_root,
        } => {
            let ca = &mut tables.mesh.ca;
            let Some(current) = ca.config.clone() else {
                return CommandResult::Error("Connect CA is not initialized yet".to_string());
            };
            let active = ca
                .active_root()
                .map(|r| r.id.to_string())
                .unwrap_or_default();
            if &active != expected_active_root {
                return CommandResult::Error(
                    "the active CA root changed while this configuration was prepared; try again"
                        .to_string(),
                );
            }
            ca.config = Some(stamped(config, current.create_index, index));
            announce(changes, CONFIG_WATCH_KEY);
            if let Some(root) = new_root {
                let now_ms = tables.leader_time_ms;
                let ca = &mut tables.mesh.ca;
                for old in ca.roots.iter_mut().filter(|r| r.active) {
                    *old = Arc::new(CaRoot {
                        active: false,
                        rotated_out_at_ms: Some(now_ms),
                        modify_index: index,
                        ..(**old).clone()
                    });
                }
                ca.roots.push(stamped_root(root, index));
                announce(changes, ROOTS_WATCH_KEY);
            }
            CommandResult::Bool(true)
        }
        CaOp::PruneRoots { now_unix_s } => {
            let ca = &mut tables.mesh.ca;
            let before_roots = ca.roots.len();
            ca.roots
                .retain(|r| r.active || r.not_after_unix_s > *now_unix_s);
            if ca.roots.len() != before_roots {
                announce(changes, ROOTS_WATCH_KEY);
            }
            CommandResult::Bool(true)
        }
    };
    if changes.len() > before {
        tables.bump_table(Table::ConnectCa, index);
    }
    debug_assert!(
        tables.mesh.ca.config.is_none()
            || tables.mesh.ca.roots.iter().filter(|r| r.active).count() == 1,
        "an initialized CA has exactly one active root"
    );
    result
}

/// The index a roots read reports.
pub fn roots_index(tables: &Tables) -> u64 {
    tables.table_index(Table::ConnectCa)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Command;

    fn root(id: &str, not_after: i64) -> Box<CaRoot> {
        Box::new(CaRoot {
            id: id.into(),
            root_cert_pem: format!("pem-{id}").into(),
            not_after_unix_s: not_after,
            ..Default::default()
        })
    }

    fn config(cluster: &str) -> Box<CaConfig> {
        Box::new(CaConfig {
            cluster_id: cluster.into(),
            provider: PROVIDER_CONSUL.into(),
            config_json: "{}".into(),
            ..Default::default()
        })
    }

    #[test]
    fn initialize_once_then_rotate_keeping_the_old_root_trusted() {
        let mut t = Tables::default();
        let mut changes = Vec::new();
        let init = |cluster: &str, id: &str| {
            Command::Ca(CaOp::Initialize {
                config: config(cluster),
                root: root(id, 1000),
            })
        };
        assert_eq!(
            t.apply(3, &init("c1", "r1"), &mut changes),
            CommandResult::Bool(true)
        );
        assert_eq!(
            t.apply(4, &init("c2", "r9"), &mut changes),
            CommandResult::Bool(false)
        );
        assert_eq!(t.mesh.ca.trust_domain().as_deref(), Some("c1.consul"));
        assert_eq!(roots_index(&t), 3);
        t.observe_leader_time(77);
        let stale = Command::Ca(CaOp::SetConfig {
            config: config("c1"),
            new_root: Some(root("r2", 2000)),
            expected_active_root: "r0".into(),
        });
        assert!(matches!(
            t.apply(5, &stale, &mut changes),
            CommandResult::Error(_)
        ));
        let rotate = Command::Ca(CaOp::SetConfig {
            config: config("c1"),
            new_root: Some(root("r2", 2000)),
            expected_active_root: "r1".into(),
        });
        changes.clear();
        assert_eq!(t.apply(6, &rotate, &mut changes), CommandResult::Bool(true));
        assert!(changes.contains(&Change {
            table: Table::ConnectCa,
            key: ChangeKey::Key(Arc::from(ROOTS_WATCH_KEY)),
        }));
        let ca = &t.mesh.ca;
        assert_eq!(ca.roots.len(), 2);
        assert_eq!(ca.active_root().unwrap().id, "r2");
        assert_eq!(ca.roots[0].rotated_out_at_ms, Some(77));
        assert_eq!(ca.config.as_ref().unwrap().create_index, 3);
        // Pruning drops only expired, inactive roots.
        t.apply(
            7,
            &Command::Ca(CaOp::PruneRoots { now_unix_s: 999 }),
            &mut changes,
        );
        assert_eq!(t.mesh.ca.roots.len(), 2);
        t.apply(
            8,
            &Command::Ca(CaOp::PruneRoots { now_unix_s: 5000 }),
            &mut changes,
        );
        assert_eq!(t.mesh.ca.roots.len(), 1);
        assert_eq!(roots_index(&t), 8);
    }
}
