//! The gateway locator (Consul's `gateway_locator.go`): which mesh gateway a server dials
//! to reach another datacenter when datacenters federate through mesh gateways.
//!
//! Its inputs are the federation states (this datacenter's row and the primary's), the
//! addresses `primary_gateways` resolved to, and how the leader's replication from the
//! primary has been going. Three ways to reach the primary, as in Consul:
//! 1. the primary's gateways from `primary_gateways` (the fallback, for bootstrapping);
//! 2. the primary's gateways from the replicated federation state;
//! 3. this datacenter's own gateways, which forward to the primary's.
//!
//! (1) and (2) are one choice, their addresses merged; (3) is the normal case once local
//! gateways exist and replication works. Every other datacenter is reached through the
//! local gateways. Only gateways with `Meta["consul-wan-federation"] = "1"` and no critical
//! check count; the primary's by their WAN address, local ones by their LAN address.
//!
//! Pure: no I/O, no clock — the time arrives as an argument (Unix milliseconds), and the
//! caller resolves `primary_gateways` and passes the addresses in. Part 2 of issue 40
//! (dialing through gateways) reads [`GatewayLocator::pick`].
//!
//! Invariants: address lists are sorted and free of duplicates; with the fallback
//! disabled, configured addresses are never offered.

use crate::store::federation::FederationState;
use std::time::Duration;

/// Consul's default `primary_gateways_interval`.
pub const PRIMARY_GATEWAYS_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
/// The shortest `primary_gateways_interval` Consul accepts.
pub const PRIMARY_GATEWAYS_INTERVAL_MIN: Duration = Duration::from_secs(1);
/// Failed replication rounds in a row after which a secondary stops trusting its local
/// gateways to reach the primary and dials the primary's gateways itself (Consul's
/// `localFederationStateReplicatorFailuresBeforeDialingDirectly`).
pub const REPLICATION_FAILURES_BEFORE_DIALING_DIRECTLY: u64 = 3;

/// What the locator knows, and how it chooses.
#[derive(Clone, Debug)]
pub struct GatewayLocator {
    datacenter: String,
    primary_datacenter: String,
    fallback_disabled: bool,
    refresh_interval_ms: u64,
    /// Whether the federation states were read at least once.
    populated: bool,
    /// The primary's usable gateways by WAN address, from its federation state.
    primary_gateways: Vec<String>,
    /// This datacenter's usable gateways by LAN address.
    local_gateways: Vec<String>,
    /// The other datacenters the federation states name, in name order: the ones a server
    /// may dial through gateways even before its WAN pool shows them (after a restart).
    federated_datacenters: Vec<String>,
    /// What `primary_gateways` resolved to last.
    fallback: Vec<String>,
    fallback_refreshed_at_ms: Option<u64>,
    /// The replication signal: only the leader replicates, so only it has one; followers
    /// trust their local gateways.
    use_replication_signal: bool,
    last_success_ms: Option<u64>,
    last_failure_ms: Option<u64>,
    failures_in_a_row: u64,
}

impl GatewayLocator {
    pub fn new(
        datacenter: &str,
        primary_datacenter: &str,
        fallback_disabled: bool,
        refresh_interval: Duration,
    ) -> GatewayLocator {
        GatewayLocator {
            datacenter: datacenter.to_string(),
            primary_datacenter: primary_datacenter.to_string(),
            fallback_disabled,
            refresh_interval_ms: refresh_interval
                .max(PRIMARY_GATEWAYS_INTERVAL_MIN)
                .as_millis() as u64,
            populated: false,
            primary_gateways: Vec::new(),
            local_gateways: Vec::new(),
            federated_datacenters: Vec::new(),
            fallback: Vec::new(),
            fallback_refreshed_at_ms: None,
            use_replication_signal: false,
            last_success_ms: None,
            last_failure_ms: None,
            failures_in_a_row: 0,
        }
    }

    fn is_primary(&self) -> bool {
        self.datacenter == self.primary_datacenter
    }

    /// Reads the usable gateways from the federation states; `true` when a list changed.
    pub fn update_from_states<'s>(
        &mut self,
        states: impl Iterator<Item = &'s FederationState>,
    ) -> bool {
        let (mut local, mut primary) = (Vec::new(), Vec::new());
        let mut datacenters = Vec::new();
        for state in states {
            if *state.datacenter != *self.datacenter {
                datacenters.push(state.datacenter.to_string());
            }
            let usable = state
                .mesh_gateways
                .iter()
                .filter(|g| g.wan_federation && g.healthy);
            if *state.datacenter == *self.datacenter {
                local = usable.clone().map(|g| g.lan_address.to_string()).collect();
            }
            // Not `else`: in the primary both are its own row.
            if *state.datacenter == *self.primary_datacenter {
                primary = usable.map(|g| g.wan_address.to_string()).collect();
            }
        }
        let (local, primary) = (sorted(local), sorted(primary));
        self.federated_datacenters = sorted(datacenters);
        self.populated = true;
        let changed = local != self.local_gateways || primary != self.primary_gateways;
        self.local_gateways = local;
        self.primary_gateways = primary;
        changed
    }

    /// Whether `primary_gateways` should be resolved again at `now_ms`: the fallback is
    /// allowed, configured, and no gateway of the primary is known from its federation
    /// state yet (Consul stops refreshing once replication delivered one), and the last
    /// refresh is at least an interval old.
    pub fn fallback_refresh_due(&self, configured: bool, now_ms: u64) -> bool {
        if self.fallback_disabled || !configured || self.is_primary() {
            return false;
        }
        if !self.primary_gateways.is_empty() {
            return false;
        }
        self.fallback_refreshed_at_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= self.refresh_interval_ms)
    }

    /// What `primary_gateways` resolved to at `now_ms`; `true` when it changed.
    pub fn refresh_fallback(&mut self, addresses: Vec<String>, now_ms: u64) -> bool {
        self.fallback_refreshed_at_ms = Some(now_ms);
        let addresses = sorted(addresses);
        let changed = addresses != self.fallback;
        self.fallback = addresses;
        changed
    }

    /// The leader's replication round ended at `now_ms`, well or not.
    pub fn replication_result(&mut self, succeeded: bool, now_ms: u64) {
        self.use_replication_signal = true;
        if succeeded {
            self.last_success_ms = Some(now_ms);
            self.failures_in_a_row = 0;
        } else {
            self.last_failure_ms = Some(now_ms);
            self.failures_in_a_row += 1;
        }
    }

    /// This server no longer leads: it has no replication signal of its own.
    pub fn forget_replication(&mut self) {
        self.use_replication_signal = false;
    }

    /// Whether a secondary reaches the primary through its local gateways (3), rather than
    /// dialing the primary's gateways itself (1 + 2).
    pub fn dial_primary_through_local_gateway(&self) -> bool {
        if self.is_primary() {
            return false;
        }
        if !self.use_replication_signal {
            // Followers trust the local gateways; the leader corrects the shared state.
            return true;
        }
        match (self.last_success_ms, self.last_failure_ms) {
            (None, None) => false,
            (Some(_), None) => true,
            (Some(success), Some(failure)) if success > failure => true,
            _ => self.failures_in_a_row < REPLICATION_FAILURES_BEFORE_DIALING_DIRECTLY,
        }
    }

    /// The addresses that may carry a call to `datacenter`, sorted.
    /// The other datacenters the federation states name.
    pub fn federated_datacenters(&self) -> &[String] {
        &self.federated_datacenters
    }

    pub fn gateways_for(&self, datacenter: &str) -> Vec<String> {
        if !self.populated {
            return Vec::new();
        }
        if datacenter != self.primary_datacenter {
            return self.local_gateways.clone();
        }
        if self.is_primary() {
            return self.primary_gateways.clone();
        }
        if self.dial_primary_through_local_gateway() && !self.local_gateways.is_empty() {
            return self.local_gateways.clone();
        }
        let mut addresses = self.primary_gateways.clone();
        if !self.fallback_disabled {
            addresses.extend(self.fallback.iter().cloned());
        }
        sorted(addresses)
    }

    /// One gateway for a call to `datacenter`, chosen by `random` among the candidates;
    /// `None` when none is known.
    pub fn pick(&self, datacenter: &str, random: u64) -> Option<String> {
        let candidates = self.gateways_for(datacenter);
        if candidates.is_empty() {
            return None;
        }
        let at = (random % candidates.len() as u64) as usize;
        candidates.into_iter().nth(at)
    }
}

fn sorted(mut addresses: Vec<String>) -> Vec<String> {
    addresses.sort();
    addresses.dedup();
    addresses
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::federation::MeshGateway;
    use arcstr::ArcStr;

    fn gateway(wan: &str, lan: &str, wan_federation: bool, healthy: bool) -> MeshGateway {
        MeshGateway {
            json: ArcStr::from("{}"),
            node: ArcStr::from("n"),
            service_id: ArcStr::from("gw"),
            wan_address: ArcStr::from(wan),
            lan_address: ArcStr::from(lan),
            wan_federation,
            healthy,
        }
    }

    fn state(dc: &str, gateways: Vec<MeshGateway>) -> FederationState {
        FederationState {
            datacenter: ArcStr::from(dc),
            mesh_gateways: gateways,
            updated_at: ArcStr::from(""),
            primary_modify_index: 1,
            create_index: 1,
            modify_index: 1,
        }
    }

    fn secondary() -> GatewayLocator {
        GatewayLocator::new("dc2", "dc1", false, PRIMARY_GATEWAYS_INTERVAL_DEFAULT)
    }

    #[test]
    fn only_healthy_wan_federation_gateways_count() {
        let mut locator = secondary();
        assert_eq!(
            locator.pick("dc1", 0),
            None,
            "nothing before the first read"
        );
        let states = [
            state(
                "dc1",
                vec![
                    gateway("1.1.1.1:443", "10.1.0.1:443", true, true),
                    gateway("1.1.1.2:443", "10.1.0.2:443", false, true),
                    gateway("1.1.1.3:443", "10.1.0.3:443", true, false),
                ],
            ),
            state(
                "dc2",
                vec![gateway("2.2.2.1:443", "10.2.0.1:443", true, true)],
            ),
        ];
        assert!(locator.update_from_states(states.iter()));
        assert!(
            !locator.update_from_states(states.iter()),
            "nothing changed"
        );
        // Another datacenter: always through the local gateways, by LAN address.
        assert_eq!(locator.gateways_for("dc3"), ["10.2.0.1:443"]);
        // The primary, as a follower (no replication signal): local gateways too.
        assert_eq!(locator.gateways_for("dc1"), ["10.2.0.1:443"]);
        // The states name the other datacenters, this one left out.
        assert_eq!(locator.federated_datacenters(), ["dc1"]);
    }

    #[test]
    fn a_leader_whose_replication_fails_dials_the_primary_directly_with_the_fallback() {
        let mut locator = secondary();
        let states = [
            state(
                "dc1",
                vec![gateway("1.1.1.1:443", "10.1.0.1:443", true, true)],
            ),
            state(
                "dc2",
                vec![gateway("2.2.2.1:443", "10.2.0.1:443", true, true)],
            ),
        ];
        locator.update_from_states(states.iter());
        locator.refresh_fallback(vec!["9.9.9.9:443".into(), "1.1.1.1:443".into()], 0);
        locator.replication_result(true, 1_000);
        assert!(locator.dial_primary_through_local_gateway());
        assert_eq!(locator.gateways_for("dc1"), ["10.2.0.1:443"]);
        // Failures after the last success: still local until the third in a row.
        locator.replication_result(false, 2_000);
        locator.replication_result(false, 3_000);
        assert!(locator.dial_primary_through_local_gateway());
        locator.replication_result(false, 4_000);
        assert!(!locator.dial_primary_through_local_gateway());
        // The primary's gateways from its state and the fallback, merged.
        assert_eq!(locator.gateways_for("dc1"), ["1.1.1.1:443", "9.9.9.9:443"]);
        assert_eq!(locator.pick("dc1", 3).as_deref(), Some("9.9.9.9:443"));
        locator.replication_result(true, 5_000);
        assert_eq!(locator.gateways_for("dc1"), ["10.2.0.1:443"]);
    }

    #[test]
    fn a_bootstrapping_secondary_uses_primary_gateways_unless_the_fallback_is_disabled() {
        let mut locator = secondary();
        // Nothing replicated yet, no local gateway.
        locator.update_from_states(std::iter::empty());
        assert!(locator.fallback_refresh_due(true, 0));
        assert!(
            !locator.fallback_refresh_due(false, 0),
            "nothing configured"
        );
        locator.refresh_fallback(vec!["198.51.100.5:443".into()], 0);
        assert!(!locator.fallback_refresh_due(true, 29_999));
        assert!(locator.fallback_refresh_due(true, 30_000), "every interval");
        locator.replication_result(false, 100);
        assert_eq!(locator.gateways_for("dc1"), ["198.51.100.5:443"]);
        // Once replication brought the primary's gateways, the fallback stops refreshing.
        locator.update_from_states(
            [state("dc1", vec![gateway("1.1.1.1:443", "", true, true)])].iter(),
        );
        assert!(!locator.fallback_refresh_due(true, 90_000));

        let mut strict = GatewayLocator::new("dc2", "dc1", true, Duration::from_secs(5));
        strict.update_from_states(std::iter::empty());
        assert!(!strict.fallback_refresh_due(true, 0));
        strict.refresh_fallback(vec!["198.51.100.5:443".into()], 0);
        strict.replication_result(false, 100);
        assert!(
            strict.gateways_for("dc1").is_empty(),
            "never the configured ones"
        );
    }

    #[test]
    fn the_primary_reaches_itself_through_its_own_gateways_by_wan_address() {
        let mut locator = GatewayLocator::new("dc1", "dc1", false, Duration::ZERO);
        locator.update_from_states(
            [state(
                "dc1",
                vec![gateway("1.1.1.1:443", "10.1.0.1:443", true, true)],
            )]
            .iter(),
        );
        assert!(!locator.dial_primary_through_local_gateway());
        assert!(
            !locator.fallback_refresh_due(true, 0),
            "the primary needs no fallback"
        );
        assert_eq!(locator.gateways_for("dc1"), ["1.1.1.1:443"]);
        assert_eq!(locator.gateways_for("dc2"), ["10.1.0.1:443"]);
    }
}
