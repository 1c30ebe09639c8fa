//! What a secondary datacenter's leader does for the Connect CA (Consul's secondary CA
//! initialization, roots replication and intermediate renewal): the primary datacenter's
//! roots are the trust anchor, and this datacenter signs its leaves with an intermediate
//! the primary's active root signed.
//!
//! One task per leadership follows the primary's roots with blocking reads
//! ([`primary::roots`]). Each answer is reconciled into the local store as one
//! [`CaOp::Replicate`]: the primary's roots, in its order, the active one carrying this
//! datacenter's intermediate and key. A new intermediate is made — a fresh key here, its CSR
//! signed by the primary ([`primary::sign_intermediate`]) and checked against the primary's
//! active root before use — when there is none yet, when the primary's active root changed
//! (a rotation there), when half of the intermediate's lifetime has passed (Consul's renewal
//! point), or when the local configuration asks for another key size. Leaves follow by
//! themselves: agents re-sign when the active root ID changes.
//!
//! Without a reachable primary nothing changes here: the datacenter keeps signing with what
//! it has (or, never having had an intermediate, signs nothing) and the task retries with a
//! doubling backoff. Invariants: only the leader proposes; a replicated active root always
//! carries a checked intermediate and its key; the task of a past leadership stops at its
//! next step (its generation no longer matches).

use super::primary::{self, PrimaryRoots};
use crate::agent::Agent;
use crate::api::connect::settings_of;
use crate::config::connect::CaSettings;
use crate::store::mesh::ca::{CaConfig, CaOp, CaRoot, CaState, PROVIDER_CONSUL};
use crate::store::{Command, CommandResult};
use crate::tls::connect_ca;
use arcstr::ArcStr;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// A failed round is retried after this, doubling up to [`RETRY_MAX`].
pub const RETRY_MIN: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// The key that signs this datacenter's leaves and its certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Signer {
    key_pem: ArcStr,
    cert_pem: ArcStr,
    signing_key_id: ArcStr,
}

fn unix_now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Follows the primary's roots for as long as this leadership (`generation` still at
/// `mine`) lasts.
pub async fn replicate(agent: Rc<Agent>, generation: Rc<Cell<u64>>, mine: u64) {
    let primary = agent.config.borrow().pending.primary_datacenter.clone();
    debug_assert_ne!(
        primary,
        agent.config.borrow().datacenter,
        "only secondaries"
    );
    log::info!("connect: replicating the CA roots from the primary datacenter {primary:?}");
    let mut index = 0;
    let mut retry = RETRY_MIN;
    loop {
        let current = generation.get() == mine && agent.shard.is_leader();
        if agent.shard.shutting_down() || !current {
            return;
        }
        let round = match primary::roots(&agent, &primary, index).await {
            Ok(roots) => reconcile(&agent, &primary, &roots)
                .await
                .map(|()| roots.index),
            Err(e) => Err(format!(
                "Error retrieving the primary datacenter's roots: {e}"
            )),
        };
        match round {
            Ok(next) => {
                retry = RETRY_MIN;
                // An index that went backwards (the primary restored a snapshot) starts
                // over, as Consul's `nextIndexVal` does.
                index = if next < index { 0 } else { next };
            }
            Err(e) => {
                log::warn!("connect: CA root replication failed, will retry in {retry:?}: {e}");
                index = 0;
                monoio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

/// Brings the local CA in line with the primary's `roots`, signing a new intermediate when
/// one is due.
async fn reconcile(agent: &Agent, primary: &str, roots: &PrimaryRoots) -> Result<(), String> {
    let Some(primary_active) = roots.active() else {
        // The primary has not made its first root yet; the next read blocks until it has.
        log::debug!("connect: the primary datacenter has no active CA root yet");
        return Ok(());
    };
    if roots.trust_domain.is_empty() {
        return Err("trust domain from primary datacenter is not initialized".to_string());
    }
    agent.shard.catch_up();
    let version = agent.shard.current_version();
    let local = &version.mesh.ca;
    let settings = local
        .config
        .as_ref()
        .map(|c| settings_of(c))
        .unwrap_or_else(|| agent.config.borrow().connect.ca.clone());
    let signer = match reusable_signer(
        local,
        primary_active,
        &roots.trust_domain,
        &settings,
        unix_now_s(),
    ) {
        Some(signer) => signer,
        None => {
            new_signer(
                agent,
                primary,
                &roots.trust_domain,
                primary_active,
                &settings,
            )
            .await?
        }
    };
    let desired = replicated_rows(roots, &signer);
    let config = CaConfig {
        cluster_id: ArcStr::from(roots.trust_domain.trim_end_matches(".consul")),
        provider: ArcStr::from(PROVIDER_CONSUL),
        config_json: ArcStr::from(settings.to_json().to_string()),
        force_without_cross_signing: false,
        create_index: 0,
        modify_index: 0,
    };
    if in_line(local, &desired, &config) {
        return Ok(());
    }
    let command = Command::Ca(CaOp::Replicate {
        config: Box::new(config),
        roots: desired,
        expected_active_root: local
            .active_root()
            .map(|r| r.id.to_string())
            .unwrap_or_default(),
    });
    match agent
        .shard
        .propose(command.encode())
        .await
        .into_command_result()
    {
        CommandResult::Bool(true) => {
            log::info!(
                "connect: updated root certificates from primary datacenter (active root {})",
                primary_active.id
            );
            Ok(())
        }
        CommandResult::Error(reason) => Err(reason),
        other => Err(format!("unexpected result of the roots write: {other:?}")),
    }
}

/// The local intermediate, when it still fits: it hangs from the primary's active root of
/// the same trust domain, has a key of the configured size, and less than half of its
/// lifetime has passed.
fn reusable_signer(
    local: &CaState,
    primary_active: &CaRoot,
    trust_domain: &str,
    settings: &CaSettings,
    now_unix_s: i64,
) -> Option<Signer> {
    let root = local.active_root()?;
    if root.id != primary_active.id
        || root.signing_cert_pem.is_empty()
        || local.trust_domain().as_deref() != Some(trust_domain)
    {
        return None;
    }
    if connect_ca::key_bits_of(&root.signing_key_pem) != Some(settings.private_key_bits) {
        return None;
    }
    let (not_before, not_after) = connect_ca::validity_of(&root.signing_cert_pem).ok()?;
    // Renewed once half its lifetime has passed (Consul's `lessThanHalfTimePassed`, with
    // the minute of backdating taken off).
    let start = not_before + connect_ca::LEAF_BACKDATE.as_secs() as i64;
    if now_unix_s >= start + (not_after - start) / 2 {
        return None;
    }
    Some(Signer {
        key_pem: root.signing_key_pem.clone(),
        cert_pem: root.signing_cert_pem.clone(),
        signing_key_id: root.signing_key_id.clone(),
    })
}

/// A new key and the primary's signature on it, checked against the primary's active root.
async fn new_signer(
    agent: &Agent,
    primary: &str,
    trust_domain: &str,
    primary_active: &CaRoot,
    settings: &CaSettings,
) -> Result<Signer, String> {
    let (csr, key) = connect_ca::make_intermediate_csr(trust_domain, settings.private_key_bits)?;
    let signed_pem = primary::sign_intermediate(agent, primary, &csr).await?;
    // The primary signs with the root active when the call arrives: one that rotated since
    // the roots were read fails this check, and the next round reads them again.
    let facts = connect_ca::check_intermediate(
        &signed_pem,
        &key,
        &primary_active.root_cert_pem,
        trust_domain,
    )
    .map_err(|e| {
        format!(
            "the primary's intermediate does not chain to its active root {} (read again next round): {e}",
            primary_active.id
        )
    })?;
    log::info!("connect: received new intermediate certificate from primary datacenter");
    Ok(Signer {
        key_pem: ArcStr::from(key),
        cert_pem: ArcStr::from(signed_pem),
        signing_key_id: ArcStr::from(facts.signing_key_id),
    })
}

/// The primary's roots as this datacenter stores them: the active one with `signer`'s
/// intermediate appended to the primary's intermediates (so a leaf's chain reaches every
/// root the primary trusts) and its key.
fn replicated_rows(roots: &PrimaryRoots, signer: &Signer) -> Vec<CaRoot> {
    let rows: Vec<CaRoot> = roots
        .roots
        .iter()
        .map(|root| {
            let active = root.active && *root.id == roots.active_root_id;
            if !active {
                return CaRoot {
                    active: false,
                    ..root.clone()
                };
            }
            let mut intermediates = root.intermediate_certs.clone();
            intermediates.push(signer.cert_pem.clone());
            CaRoot {
                intermediate_certs: intermediates,
                signing_key_id: signer.signing_key_id.clone(),
                signing_key_pem: signer.key_pem.clone(),
                signing_cert_pem: signer.cert_pem.clone(),
                ..root.clone()
            }
        })
        .collect();
    debug_assert_eq!(rows.iter().filter(|r| r.active).count(), 1);
    rows
}

/// Whether the local CA already holds `desired` and `config` (indexes and rotation times
/// aside).
fn in_line(local: &CaState, desired: &[CaRoot], config: &CaConfig) -> bool {
    let bare = |root: &CaRoot| CaRoot {
        create_index: 0,
        modify_index: 0,
        rotated_out_at_ms: None,
        ..root.clone()
    };
    let config_same = local.config.as_ref().is_some_and(|c| {
        c.cluster_id == config.cluster_id
            && c.provider == config.provider
            && c.config_json == config.config_json
    });
    config_same
        && desired.iter().all(|want| {
            local
                .roots
                .iter()
                .any(|have| have.id == want.id && bare(have) == bare(want))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    const TRUST_DOMAIN: &str = "0f8c3d4e-1111-2222-3333-444444444444.consul";
    const NOW: i64 = 1_700_000_000;

    fn primary_root(bits: u32) -> connect_ca::MadeRoot {
        connect_ca::make_root(&connect_ca::RootSpec {
            cluster_id: TRUST_DOMAIN.trim_end_matches(".consul").into(),
            key_bits: bits,
            ttl: Duration::from_secs(10 * 365 * 86400),
            now_unix_s: NOW,
        })
        .unwrap()
    }

    fn signed_by(root: &connect_ca::MadeRoot, bits: u32, ttl_s: u64) -> Signer {
        let (csr, key) = connect_ca::make_intermediate_csr(TRUST_DOMAIN, bits).unwrap();
        let pem = connect_ca::sign_intermediate(&connect_ca::IntermediateSpec {
            csr_pem: &csr,
            ca_cert_pem: &root.cert_pem,
            ca_key_pem: &root.key_pem,
            trust_domain: TRUST_DOMAIN,
            ttl: Duration::from_secs(ttl_s),
            now_unix_s: NOW,
        })
        .unwrap();
        let facts =
            connect_ca::check_intermediate(&pem, &key, &root.cert_pem, TRUST_DOMAIN).unwrap();
        Signer {
            key_pem: key.into(),
            cert_pem: pem.into(),
            signing_key_id: facts.signing_key_id.into(),
        }
    }

    fn row(made: &connect_ca::MadeRoot, active: bool) -> CaRoot {
        CaRoot {
            id: made.id.clone().into(),
            root_cert_pem: made.cert_pem.clone().into(),
            active,
            ..CaRoot::default()
        }
    }

    #[test]
    fn the_local_intermediate_is_kept_until_the_root_the_key_size_or_half_its_life_changes() {
        let primary = primary_root(256);
        let roots = PrimaryRoots {
            index: 9,
            trust_domain: TRUST_DOMAIN.into(),
            active_root_id: primary.id.clone(),
            roots: vec![row(&primary, true)],
        };
        let signer = signed_by(&primary, 256, 1000);
        let rows = replicated_rows(&roots, &signer);
        assert_eq!(rows[0].intermediate_certs, vec![signer.cert_pem.clone()]);
        assert_eq!(rows[0].signer_cert_pem(), &*signer.cert_pem);
        let local = CaState {
            config: Some(Arc::new(CaConfig {
                cluster_id: TRUST_DOMAIN.trim_end_matches(".consul").into(),
                ..CaConfig::default()
            })),
            roots: rows.into_iter().map(Arc::new).collect(),
        };
        let settings = CaSettings::default();
        let active = &roots.roots[0];
        // Fresh: kept. Past half of its 1000 s (from its backdated start): renewed.
        assert_eq!(
            reusable_signer(&local, active, TRUST_DOMAIN, &settings, NOW + 100),
            Some(signer.clone())
        );
        assert!(reusable_signer(&local, active, TRUST_DOMAIN, &settings, NOW + 500).is_none());
        // Another key size configured, another trust domain, or another active root: renewed.
        let p384 = CaSettings {
            private_key_bits: 384,
            ..CaSettings::default()
        };
        assert!(reusable_signer(&local, active, TRUST_DOMAIN, &p384, NOW).is_none());
        assert!(reusable_signer(&local, active, "other.consul", &settings, NOW).is_none());
        let rotated = row(&primary_root(256), true);
        assert!(reusable_signer(&local, &rotated, TRUST_DOMAIN, &settings, NOW).is_none());
        // What was written is in line; a rotated primary list is not.
        let config = CaConfig {
            cluster_id: TRUST_DOMAIN.trim_end_matches(".consul").into(),
            ..CaConfig::default()
        };
        assert!(in_line(&local, &replicated_rows(&roots, &signer), &config));
        let two = PrimaryRoots {
            active_root_id: rotated.id.to_string(),
            roots: vec![row(&primary, false), rotated.clone()],
            ..roots.clone()
        };
        assert!(!in_line(&local, &replicated_rows(&two, &signer), &config));
    }
}
