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
//! Across datacenters (Consul's secondary CA): the primary datacenter's roots are the trust
//! anchor everywhere. A secondary holds no root key; its leader replicates the primary's
//! roots ([`CaOp::Replicate`]) with the secondary's own intermediate — signed by the
//! primary's active root — on the active row, whose key signs this datacenter's leaves.
//! Roots a secondary trusted before that the primary does not list stay, rotated out, until
//! they expire and are pruned, as in the primary.
//!
//! Watch keys ([`Table::ConnectCa`]): [`ROOTS_WATCH_KEY`] when the roots change,
//! [`CONFIG_WATCH_KEY`] when the configuration does.
//!
//! Invariants: an initialized CA has exactly one active root; the active root's key signs
//! leaves through [`CaRoot::signer_cert_pem`] (the root itself, or a secondary's
//! intermediate); replicated roots keep their IDs, so a leaf records which root it hangs
//! from in every datacenter.

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
    /// The certificate of `signing_key_pem` when it is not the root's own: in a secondary
    /// datacenter, its intermediate, signed by the primary's root (and also the last of
    /// `intermediate_certs`). Empty: the root signs. Appended last, so older snapshots
    /// read with none.
    #[serde(default)]
    pub signing_cert_pem: ArcStr,
}

impl CaRoot {
    /// The certificate whose key (`signing_key_pem`) signs this root's leaves.
    pub fn signer_cert_pem(&self) -> &str {
        if self.signing_cert_pem.is_empty() {
            &self.root_cert_pem
        } else {
            &self.signing_cert_pem
        }
    }
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
    /// A secondary datacenter's CA, replicated from the primary: `config` (the primary's
    /// cluster ID, this datacenter's settings) and the primary's trusted roots in its order,
    /// exactly one active — carrying this datacenter's intermediate and its key. Roots held
    /// here that the primary does not list stay, rotated out. Refused when the active root
    /// changed since `expected_active_root` (empty: none) was read, so two leaders racing
    /// leave one intermediate.
    Replicate {
        config: Box<CaConfig>,
        roots: Vec<CaRoot>,
        expected_active_root: String,
    },
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
        CaOp::Replicate {
            config,
            roots,
            expected_active_root,
        } => match replicate(tables, index, config, roots, expected_active_root) {
            Ok(()) => {
                announce(changes, CONFIG_WATCH_KEY);
                announce(changes, ROOTS_WATCH_KEY);
                CommandResult::Bool(true)
            }
            Err(reason) => CommandResult::Error(reason),
        },
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

/// Installs a secondary's replicated roots and configuration (see [`CaOp::Replicate`]).
fn replicate(
    tables: &mut Tables,
    index: u64,
    config: &CaConfig,
    incoming: &[CaRoot],
    expected_active_root: &str,
) -> Result<(), String> {
    let now_ms = tables.leader_time_ms;
    let ca = &mut tables.mesh.ca;
    let active_now = ca.active_root().map(|r| &*r.id).unwrap_or_default();
    if active_now != expected_active_root {
        return Err(
            "the active CA root changed while the replicated roots were prepared; try again"
                .to_string(),
        );
    }
    let active_incoming: Vec<&CaRoot> = incoming.iter().filter(|r| r.active).collect();
    let [active] = &active_incoming[..] else {
        return Err(format!(
            "replicated roots must have exactly one active root, not {}",
            active_incoming.len()
        ));
    };
    if active.signing_key_pem.is_empty() || active.signing_cert_pem.is_empty() {
        return Err("the replicated active root carries no intermediate to sign with".to_string());
    }
    // Roots only this datacenter held (its own from before it was a secondary, or ones
    // the primary pruned already) stay trusted, rotated out, until they expire here.
    let mut next: Vec<Arc<CaRoot>> = Vec::with_capacity(ca.roots.len() + incoming.len());
    for old in &ca.roots {
        if incoming.iter().any(|r| r.id == old.id) {
            continue;
        }
        if old.active {
            next.push(Arc::new(CaRoot {
                active: false,
                rotated_out_at_ms: Some(now_ms),
                modify_index: index,
                ..(**old).clone()
            }));
        } else {
            next.push(old.clone());
        }
    }
    for root in incoming {
        let previous = ca.roots.iter().find(|r| r.id == root.id);
        let rotated_out_at_ms = if root.active {
            None
        } else {
            previous.and_then(|p| p.rotated_out_at_ms).or(Some(now_ms))
        };
        next.push(Arc::new(CaRoot {
            rotated_out_at_ms,
            create_index: previous.map_or(index, |p| p.create_index),
            modify_index: index,
            ..root.clone()
        }));
    }
    let create_index = ca.config.as_ref().map_or(index, |c| c.create_index);
    ca.config = Some(stamped(config, create_index, index));
    ca.roots = next;
    Ok(())
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

    fn replicated(id: &str, active: bool) -> CaRoot {
        CaRoot {
            active,
            signing_key_pem: if active { "key".into() } else { "".into() },
            signing_cert_pem: if active { "inter".into() } else { "".into() },
            ..*root(id, 5000)
        }
    }

    #[test]
    fn a_secondary_replicates_the_primary_roots_and_keeps_its_own_until_they_expire() {
        let mut t = Tables::default();
        let mut changes = Vec::new();
        // A datacenter that ran its own CA before it was made a secondary.
        let init = Command::Ca(CaOp::Initialize {
            config: config("local"),
            root: root("own", 1000),
        });
        t.apply(3, &init, &mut changes);
        assert_eq!(
            t.mesh.ca.active_root().unwrap().signer_cert_pem(),
            "pem-own"
        );
        let replicate = |roots: Vec<CaRoot>, expected: &str| {
            Command::Ca(CaOp::Replicate {
                config: config("primary"),
                roots,
                expected_active_root: expected.into(),
            })
        };
        // A stale expectation or a list without one signing active root is refused.
        assert!(matches!(
            t.apply(
                4,
                &replicate(vec![replicated("p1", true)], "other"),
                &mut changes
            ),
            CommandResult::Error(_)
        ));
        assert!(matches!(
            t.apply(
                5,
                &replicate(vec![replicated("p1", false)], "own"),
                &mut changes
            ),
            CommandResult::Error(_)
        ));
        let no_intermediate = CaRoot {
            signing_cert_pem: "".into(),
            ..replicated("p1", true)
        };
        assert!(matches!(
            t.apply(6, &replicate(vec![no_intermediate], "own"), &mut changes),
            CommandResult::Error(_)
        ));
        t.observe_leader_time(90);
        changes.clear();
        assert_eq!(
            t.apply(
                7,
                &replicate(vec![replicated("p1", true)], "own"),
                &mut changes
            ),
            CommandResult::Bool(true)
        );
        assert!(changes.contains(&Change {
            table: Table::ConnectCa,
            key: ChangeKey::Key(Arc::from(ROOTS_WATCH_KEY)),
        }));
        let ca = &t.mesh.ca;
        assert_eq!(ca.trust_domain().as_deref(), Some("primary.consul"));
        assert_eq!(ca.config.as_ref().unwrap().create_index, 3);
        let ids: Vec<&str> = ca.roots.iter().map(|r| &*r.id).collect();
        assert_eq!(ids, ["own", "p1"]);
        assert_eq!(ca.roots[0].rotated_out_at_ms, Some(90));
        let active = ca.active_root().unwrap();
        assert_eq!((&*active.id, active.signer_cert_pem()), ("p1", "inter"));
        // The primary rotates: its old root is listed inactive, the new one active.
        assert_eq!(
            t.apply(
                8,
                &replicate(vec![replicated("p1", false), replicated("p2", true)], "p1"),
                &mut changes
            ),
            CommandResult::Bool(true)
        );
        let ca = &t.mesh.ca;
        let ids: Vec<&str> = ca.roots.iter().map(|r| &*r.id).collect();
        assert_eq!(ids, ["own", "p1", "p2"]);
        assert_eq!(
            ca.roots[1].create_index, 7,
            "a replicated row keeps its creation"
        );
        assert!(!ca.roots[1].active && ca.roots[2].active);
        // Expired rotated-out roots go as in the primary.
        t.apply(
            9,
            &Command::Ca(CaOp::PruneRoots { now_unix_s: 2000 }),
            &mut changes,
        );
        let ids: Vec<&str> = t.mesh.ca.roots.iter().map(|r| &*r.id).collect();
        assert_eq!(ids, ["p1", "p2"]);
    }
}
