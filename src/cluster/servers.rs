//! The client agent's server manager: which server each RPC of a client agent goes to.
//!
//! A client agent keeps no store; every store-bound request (forwarded HTTP, anti-entropy,
//! node-state reads, sessions, DNS) goes to one server. As Consul's `router.Manager` does,
//! the manager keeps the datacenter's alive servers from gossip in a list whose first entry
//! is the server in use:
//!
//! - **pick**: every RPC goes to the first server, so one client keeps one connection warm;
//! - **failure**: an RPC that cannot reach its server moves that server to the end of the
//!   list ([`ServerList::failed`]), and the caller retries at once on the new first one;
//! - **membership**: servers gossip no longer shows alive are removed, new ones are appended
//!   (so they take load only after a rebalance or a failure), the one in use stays first;
//! - **rebalancing**: on a jittered interval scaled by cluster size
//!   ([`rebalance_interval`], Consul's formula) the list is shuffled and the first server
//!   that answers a ping moves to the front, so clients spread over servers over time.
//!
//! The data and its transitions ([`ServerList`], [`rebalance_interval`], [`Backoff`],
//! [`LogLimiter`]) are pure: time and random draws come in as arguments. [`ServerManager`]
//! shares one list among all shards of the agent without locks on the request path: a pick
//! is one atomic load, and the rare changes swap a new list in (read-copy-update).
//! [`call_typed`] is the one way a client sends an RPC: pick, send, and on a transport failure
//! mark the server failed and retry on the next, within Consul's `rpc_hold_timeout`.
//!
//! Invariants: the server in use is always `servers[0]`; a server appears at most once; a
//! failure report about a server that is no longer first changes nothing (another caller
//! already rotated past it), so concurrent failures of one server rotate it once.

use crate::consul::metrics::Counter;
use crate::shard::rpc_client::{CallError, RpcClient};
use crate::telemetry;
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shortest time a client keeps using one server before a rebalance may move it
/// (Consul's `clientRPCMinReuseDuration`).
pub const CLIENT_RPC_MIN_REUSE: Duration = Duration::from_secs(120);
/// The rebalance interval is stretched by a random part of up to 1/this of the minimum
/// reuse time (Consul's `clientRPCJitterFraction`).
pub const CLIENT_RPC_JITTER_FRACTION: u32 = 2;
/// New connections per second per server that rebalancing may cause cluster-wide
/// (Consul's `newRebalanceConnsPerSecPerServer`).
pub const REBALANCE_CONNECTIONS_PER_SECOND_PER_SERVER: u64 = 64;
/// How long a client RPC keeps retrying (and waits for a first server) before it fails
/// (Consul's `rpc_hold_timeout` default).
pub const RPC_HOLD_TIMEOUT: Duration = Duration::from_secs(7);
/// Retries of one RPC wait up to `RPC_HOLD_TIMEOUT / RETRY_JITTER_FRACTION` when no other
/// server is left to try (Consul's `structs.JitterFraction`).
pub const RETRY_JITTER_FRACTION: u32 = 16;
/// Most attempts of one RPC, whatever the clock says: with a few servers and fast failures
/// the hold timeout alone would allow a burst of hundreds.
pub const CALL_ATTEMPTS_MAX: usize = 16;
/// How often a caller looks for a first server while the list is empty.
const NO_SERVER_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long a rebalance ping may take before the server counts as unhealthy.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// Most servers the list holds. Consul's datacenters run 3–7; a bound keeps a gossip pool
/// full of bogus server tags from growing every client's list without limit.
pub const SERVERS_MAX: usize = 256;
/// Consul's answer when a client knows no server.
pub const NO_SERVERS: &str = "No known Consul servers";

/// One server as the client reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub name: String,
    /// The server RPC address.
    pub addr: SocketAddr,
}

/// The known servers, the one in use first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerList {
    servers: Vec<Server>,
}

impl ServerList {
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// The server the next RPC goes to.
    pub fn pick(&self) -> Option<&Server> {
        self.servers.first()
    }

    /// Moves a failed server to the end of the list if it is the one in use. Returns
    /// whether the list changed; a report about a server that is no longer first (another
    /// caller rotated past it already) or about the only server changes nothing.
    pub fn failed(&mut self, addr: SocketAddr) -> bool {
        if self.servers.len() < 2 || self.servers[0].addr != addr {
            return false;
        }
        self.servers.rotate_left(1);
        assert_ne!(
            self.servers[0].addr, addr,
            "a failed server is not picked next"
        );
        assert_eq!(self.servers.last().map(|s| s.addr), Some(addr));
        true
    }

    /// Brings the list in line with the servers gossip shows alive: gone ones are removed,
    /// known ones updated in place (an address may change), new ones appended in a random
    /// order (`draw(n)` returns an index below `n`), so that clients learning the same
    /// servers at once do not all pick the same one. Returns whether the list changed.
    pub fn reconcile(&mut self, alive: &[Server], draw: &mut impl FnMut(usize) -> usize) -> bool {
        let before = self.servers.clone();
        self.servers
            .retain(|s| alive.iter().any(|a| a.name == s.name));
        for server in self.servers.iter_mut() {
            if let Some(current) = alive.iter().find(|a| a.name == server.name) {
                server.addr = current.addr;
            }
        }
        let mut fresh: Vec<Server> = alive
            .iter()
            .filter(|a| !self.servers.iter().any(|s| s.name == a.name))
            .cloned()
            .collect();
        fresh.dedup_by(|a, b| a.name == b.name);
        shuffle(&mut fresh, draw);
        for server in fresh {
            if self.servers.len() >= SERVERS_MAX {
                break;
            }
            if !self.servers.iter().any(|s| s.name == server.name) {
                self.servers.push(server);
            }
        }
        assert!(self.servers.len() <= alive.len().min(SERVERS_MAX));
        self.servers != before
    }

    /// The list in a random order: the order in which a rebalance tries servers.
    pub fn shuffled(&self, draw: &mut impl FnMut(usize) -> usize) -> Vec<Server> {
        let mut order = self.servers.clone();
        shuffle(&mut order, draw);
        order
    }

    /// Adopts a rebalance's outcome: `order` (a shuffle of an earlier list) rotated so that
    /// `healthy`, the first of it that answered a ping, comes first, and then reconciled
    /// with the current list — servers gone meanwhile are dropped, new ones appended.
    /// Returns false, changing nothing, when `healthy` is no longer known (Consul then keeps
    /// the current list until the next rebalance).
    pub fn rebalance(&mut self, order: &[Server], healthy: &Server) -> bool {
        if !self.servers.iter().any(|s| s.name == healthy.name) {
            return false;
        }
        let Some(at) = order.iter().position(|s| s.name == healthy.name) else {
            return false;
        };
        let mut next: Vec<Server> = order[at..]
            .iter()
            .chain(&order[..at])
            .filter_map(|s| self.servers.iter().find(|c| c.name == s.name).cloned())
            .collect();
        for server in &self.servers {
            if !next.iter().any(|s| s.name == server.name) {
                next.push(server.clone());
            }
        }
        assert_eq!(
            next.len(),
            self.servers.len(),
            "a rebalance keeps every server"
        );
        assert_eq!(next[0].name, healthy.name);
        self.servers = next;
        true
    }
}

/// Fisher–Yates with the caller's random draws.
fn shuffle<T>(items: &mut [T], draw: &mut impl FnMut(usize) -> usize) {
    for i in (1..items.len()).rev() {
        let j = draw(i + 1);
        assert!(j <= i, "a draw below {} gave {j}", i + 1);
        items.swap(i, j);
    }
}

/// How long until the next rebalance (Consul's `refreshServerRebalanceTimer`): at least the
/// minimum reuse time plus `stagger` (drawn by the caller below `CLIENT_RPC_MIN_REUSE /
/// CLIENT_RPC_JITTER_FRACTION`), and long enough that all `lan_members` clients together
/// open no more than `REBALANCE_CONNECTIONS_PER_SECOND_PER_SERVER` connections per second
/// per server.
pub fn rebalance_interval(servers: usize, lan_members: usize, stagger: Duration) -> Duration {
    assert!(stagger <= CLIENT_RPC_MIN_REUSE / CLIENT_RPC_JITTER_FRACTION);
    let floor = CLIENT_RPC_MIN_REUSE + stagger;
    let connections_per_second = servers as u64 * REBALANCE_CONNECTIONS_PER_SECOND_PER_SERVER;
    if connections_per_second == 0 {
        return floor;
    }
    let scaled = Duration::from_secs_f64(lan_members as f64 / connections_per_second as f64);
    scaled.max(floor)
}

/// Exponential back-off between failed rounds of some periodic work (anti-entropy when no
/// server answers): `first`, doubling per consecutive failure up to `max`, with up to 1/8
/// of random spread drawn by the caller.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Backoff {
        assert!(!first.is_zero() && first <= max);
        Backoff {
            first,
            max,
            failures: 0,
        }
    }

    /// Records a failure; returns the delay before the next try. `spread` in `[0, 1)`.
    pub fn failed(&mut self, spread: f64) -> Duration {
        assert!((0.0..1.0).contains(&spread));
        self.failures = self.failures.saturating_add(1);
        let doublings = (self.failures - 1).min(16);
        let base = self.first.saturating_mul(1 << doublings).min(self.max);
        let delay = base + base.mul_f64(spread / 8.0);
        assert!(delay >= self.first && delay <= self.max + self.max / 8);
        delay
    }

    /// Records a success: the next failure starts from `first` again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// Lets a recurring failure be logged once, then at most once per `interval` with the
/// number of repeats it left out, so a server that stays down costs a few log lines.
#[derive(Clone, Debug)]
pub struct LogLimiter {
    interval: Duration,
    last_logged: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    pub fn new(interval: Duration) -> LogLimiter {
        LogLimiter {
            interval,
            last_logged: None,
            suppressed: 0,
        }
    }

    /// Whether to log an occurrence at `now`: `Some(n)` with the `n` occurrences left out
    /// since the last line, or `None` to stay quiet.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last_logged {
            Some(at) if now.saturating_duration_since(at) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last_logged = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// Ends a streak of failures: returns whether any was logged (so the recovery is worth
    /// a line), and lets the next failure be logged at once.
    pub fn recovered(&mut self) -> bool {
        let was_logging = self.last_logged.is_some();
        self.last_logged = None;
        self.suppressed = 0;
        was_logging
    }
}

/// Failovers are logged once, then at most once per this interval with a count.
pub const FAILOVER_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// The agent's server list, shared by every shard. Reads are lock-free; changes swap in a
/// new list and ring a one-slot channel so the router can tell the shards.
pub struct ServerManager {
    list: ArcSwap<ServerList>,
    /// No server answered the last rebalance's pings (Consul's `IsOffline`).
    offline: AtomicBool,
    changed_tx: flume::Sender<()>,
    changed_rx: flume::Receiver<()>,
    /// Rate of failover log lines. Only ever `try_lock`ed: a caller that finds it taken
    /// skips its line (another shard is logging the same outage) instead of waiting.
    failover_log: Mutex<LogLimiter>,
}

impl Default for ServerManager {
    fn default() -> Self {
        let (changed_tx, changed_rx) = flume::bounded(1);
        ServerManager {
            list: ArcSwap::from_pointee(ServerList::default()),
            offline: AtomicBool::new(true),
            changed_tx,
            changed_rx,
            failover_log: Mutex::new(LogLimiter::new(FAILOVER_LOG_INTERVAL)),
        }
    }
}

/// The tail of a rate-limited log line: how many like it were left out.
pub fn left_out_note(left_out: u64) -> String {
    if left_out == 0 {
        String::new()
    } else {
        format!(" ({left_out} more like this not logged)")
    }
}

fn random_below(n: usize) -> usize {
    rand::random_range(0..n)
}

impl ServerManager {
    /// The server RPC address the next client RPC should go to.
    pub fn pick(&self) -> Option<SocketAddr> {
        self.list.load().pick().map(|s| s.addr)
    }

    /// The current list, the server in use first.
    pub fn list(&self) -> Arc<ServerList> {
        self.list.load_full()
    }

    /// Reports that an RPC to `addr` failed in transport (`reason` says how) at `now`: the
    /// server moves to the end of the list if it was in use, and that move is logged (at
    /// most once per `FAILOVER_LOG_INTERVAL`, with the count of moves left out).
    pub fn failed(&self, addr: SocketAddr, reason: &str, now: Instant) {
        let mut rotated = false;
        let previous = self.list.rcu(|current| {
            let mut next = ServerList::clone(current);
            rotated = next.failed(addr);
            next
        });
        if rotated {
            let now_using = self.pick();
            let name = previous
                .servers()
                .iter()
                .find(|s| s.addr == addr)
                .map(|s| s.name.clone())
                .unwrap_or_default();
            let allowed = match self.failover_log.try_lock() {
                Ok(mut limiter) => limiter.allow(now),
                Err(_) => None,
            };
            match (allowed, now_using) {
                (Some(left_out), Some(using)) => log::warn!(
                    "agent: server {name} ({addr}) failed: {reason}; now using {using}{}",
                    left_out_note(left_out)
                ),
                (Some(left_out), None) => log::warn!(
                    "agent: server {name} ({addr}) failed: {reason}{}",
                    left_out_note(left_out)
                ),
                (None, _) => log::debug!("agent: server {name} ({addr}) failed: {reason}"),
            }
            self.ring();
        }
    }

    /// Sets the servers gossip shows alive (see [`ServerList::reconcile`]).
    pub fn set_alive(&self, alive: &[Server]) -> bool {
        let mut changed = false;
        self.list.rcu(|current| {
            let mut next = ServerList::clone(current);
            changed = next.reconcile(alive, &mut random_below);
            next
        });
        if changed {
            if !alive.is_empty() {
                self.offline.store(false, Ordering::Relaxed);
            }
            self.ring();
        }
        changed
    }

    /// Adopts a rebalance's outcome (see [`ServerList::rebalance`]); `healthy: None` means
    /// no server answered, and the list stays as it is.
    pub fn rebalanced(&self, order: &[Server], healthy: Option<&Server>) -> bool {
        let Some(healthy) = healthy else {
            self.offline.store(true, Ordering::Relaxed);
            return false;
        };
        self.offline.store(false, Ordering::Relaxed);
        let mut changed = false;
        self.list.rcu(|current| {
            let mut next = ServerList::clone(current);
            changed = next.rebalance(order, healthy) && next != **current;
            next
        });
        if changed {
            self.ring();
        }
        changed
    }

    /// Whether no server answered the last rebalance (or none was ever known).
    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Relaxed)
    }

    /// Rung (at most one pending) whenever the list changes.
    pub fn changes(&self) -> flume::Receiver<()> {
        self.changed_rx.clone()
    }

    fn ring(&self) {
        let _ = self.changed_tx.try_send(());
    }
}

/// Which failed attempts of an RPC may be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Any transport failure: reads, and writes that are idempotent (anti-entropy's
    /// registrations) — a request that reached the server twice does no harm.
    Always,
    /// Only when the request never left this agent (no connection); a write that may have
    /// reached the server is not repeated, as Consul's client does not repeat it.
    NotSent,
}

/// Makes one of Consul's typed calls on a server the manager picks, over `client` (the
/// calling shard's connections), with [`with_failover`]'s failover. The server's answer is
/// returned as it is, its error text included (`Err(CallError::Remote)`); a transport
/// failure after the last attempt is `Err(CallError::Transport)`.
pub async fn call_typed(
    manager: &ServerManager,
    client: &RpcClient,
    method: &str,
    body: &[u8],
    timeout: Duration,
    retry: Retry,
) -> Result<bytes::Bytes, CallError> {
    call_typed_in(manager, client, None, method, body, timeout, retry).await
}

/// [`call_typed`] to the servers of `datacenter` (`None`: this agent's own), whose name a
/// new TLS connection asks for: a server hands a call naming another datacenter to one of
/// its servers through here, with the WAN router's list of them (`cluster::router`).
pub async fn call_typed_in(
    manager: &ServerManager,
    client: &RpcClient,
    datacenter: Option<&str>,
    method: &str,
    body: &[u8],
    timeout: Duration,
    retry: Retry,
) -> Result<bytes::Bytes, CallError> {
    with_failover(manager, retry, async |addr| {
        client.call(addr, datacenter, method, body, timeout).await
    })
    .await
}

/// Runs `attempt` on the server in use until a server answers (`Ok`, or its error text as
/// `Err(CallError::Remote)`, which ends the call as it is): a transport failure marks the
/// server failed and, as `retry` allows (always, or only when nothing was sent), tries the
/// next one at once (after a short random pause when no other is left), for at most
/// `RPC_HOLD_TIMEOUT`; with no server known it waits for one that long. The last transport
/// failure comes back as `CallError::Transport`, its reason prefixed `rpc error:`.
pub(crate) async fn with_failover(
    manager: &ServerManager,
    retry: Retry,
    mut attempt: impl AsyncFnMut(SocketAddr) -> Result<bytes::Bytes, CallError>,
) -> Result<bytes::Bytes, CallError> {
    let started = Instant::now();
    let mut attempts = 0usize;
    loop {
        let Some(addr) = manager.pick() else {
            if started.elapsed() >= RPC_HOLD_TIMEOUT {
                return Err(CallError::Transport {
                    reason: NO_SERVERS.to_string(),
                    sent: true,
                });
            }
            monoio::time::sleep(NO_SERVER_POLL_INTERVAL).await;
            continue;
        };
        attempts += 1;
        // Counted per attempt, as Consul's client counts each try.
        telemetry::incr(Counter::ClientRpc);
        let (reason, sent) = match attempt(addr).await {
            Err(CallError::Transport { reason, sent }) => (reason, sent),
            // A server's answer, error or not, ends the call.
            answered => return answered,
        };
        telemetry::incr(Counter::ClientRpcFailed);
        manager.failed(addr, &reason, Instant::now());
        let may_retry = retry == Retry::Always || !sent;
        if !may_retry || attempts >= CALL_ATTEMPTS_MAX || started.elapsed() >= RPC_HOLD_TIMEOUT {
            return Err(CallError::Transport {
                reason: format!("rpc error: {reason}"),
                sent: true,
            });
        }
        if manager.pick() == Some(addr) {
            // Nowhere else to go: wait a little before asking the same server again.
            let most = RPC_HOLD_TIMEOUT / RETRY_JITTER_FRACTION;
            let pause = most.mul_f64(rand::random_range(0.25..1.0));
            monoio::time::sleep(pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, port: u16) -> Server {
        Server {
            name: name.to_string(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn names(list: &ServerList) -> Vec<&str> {
        list.servers().iter().map(|s| s.name.as_str()).collect()
    }

    /// Draws that never move anything, so orders are predictable.
    fn identity(n: usize) -> usize {
        n - 1
    }

    #[test]
    fn a_failed_server_in_use_moves_to_the_end_once() {
        let mut list = ServerList::default();
        let all = [server("a", 1), server("b", 2), server("c", 3)];
        assert!(list.reconcile(&all, &mut identity));
        assert_eq!(names(&list), ["a", "b", "c"]);
        assert!(list.failed(all[0].addr));
        assert_eq!(names(&list), ["b", "c", "a"]);
        // A second report about the same server (a concurrent caller) changes nothing.
        assert!(!list.failed(all[0].addr));
        assert_eq!(names(&list), ["b", "c", "a"]);
        // Nor does a report about a server not in use.
        assert!(!list.failed(all[2].addr));
        // A single server stays in use: there is nothing to rotate to.
        let mut single = ServerList::default();
        single.reconcile(&all[..1], &mut identity);
        assert!(!single.failed(all[0].addr));
        assert_eq!(single.pick(), Some(&all[0]));
        assert_eq!(ServerList::default().pick(), None);
    }

    #[test]
    fn gossip_changes_keep_the_server_in_use_and_append_new_ones() {
        let mut list = ServerList::default();
        list.reconcile(&[server("a", 1), server("b", 2)], &mut identity);
        list.failed(server("a", 1).addr);
        assert_eq!(names(&list), ["b", "a"]);
        // c joins, a leaves, b moves to another port: b stays in use, c goes last.
        let changed = list.reconcile(&[server("b", 9), server("c", 3)], &mut identity);
        assert!(changed);
        assert_eq!(names(&list), ["b", "c"]);
        assert_eq!(list.pick().unwrap().addr.port(), 9);
        assert!(!list.reconcile(&[server("c", 3), server("b", 9)], &mut identity));
        // Every server gone: nothing to pick.
        assert!(list.reconcile(&[], &mut identity));
        assert_eq!(list.pick(), None);
    }

    #[test]
    fn new_servers_arrive_in_the_order_the_draws_give() {
        let all = [server("a", 1), server("b", 2), server("c", 3)];
        let mut first_picks = std::collections::BTreeSet::new();
        for seed in 0..3usize {
            let mut draw = |n: usize| (seed + n) % n;
            let mut list = ServerList::default();
            list.reconcile(&all, &mut draw);
            let mut sorted = names(&list);
            sorted.sort();
            assert_eq!(sorted, ["a", "b", "c"], "every server once");
            first_picks.insert(list.pick().unwrap().name.clone());
        }
        assert!(
            first_picks.len() > 1,
            "different draws spread the first pick"
        );
    }

    #[test]
    fn a_rebalance_puts_the_healthy_server_first_and_keeps_every_server() {
        let mut list = ServerList::default();
        list.reconcile(
            &[server("a", 1), server("b", 2), server("c", 3)],
            &mut identity,
        );
        let order = vec![server("c", 3), server("a", 1), server("b", 2)];
        // c did not answer; a did.
        assert!(list.rebalance(&order, &server("a", 1)));
        assert_eq!(names(&list), ["a", "b", "c"]);
        // Meanwhile d joined and b left: the outcome is reconciled with that.
        list.reconcile(
            &[server("a", 1), server("c", 3), server("d", 4)],
            &mut identity,
        );
        let order = vec![server("b", 2), server("c", 3), server("a", 1)];
        assert!(list.rebalance(&order, &server("c", 3)));
        assert_eq!(names(&list), ["c", "a", "d"]);
        // A healthy server that left before the outcome arrived changes nothing.
        let before = list.clone();
        assert!(!list.rebalance(&order, &server("b", 2)));
        assert_eq!(list, before);
    }

    #[test]
    fn rebalance_interval_follows_consuls_formula() {
        // Small clusters: the minimum reuse time plus the stagger.
        let stagger = Duration::from_secs(30);
        assert_eq!(
            rebalance_interval(3, 40, stagger),
            CLIENT_RPC_MIN_REUSE + stagger
        );
        assert_eq!(
            rebalance_interval(0, 40, Duration::ZERO),
            CLIENT_RPC_MIN_REUSE
        );
        // 100,000 members and 3 servers: 100,000 / (3 × 64) ≈ 521 s.
        let big = rebalance_interval(3, 100_000, Duration::ZERO);
        assert!(
            big > Duration::from_secs(520) && big < Duration::from_secs(522),
            "{big:?}"
        );
        // More servers absorb more reconnections: the interval shrinks.
        assert!(rebalance_interval(5, 100_000, Duration::ZERO) < big);
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_resets() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(15));
        let delays: Vec<u64> = (0..6).map(|_| backoff.failed(0.0).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 15, 15]);
        assert_eq!(backoff.failures(), 6);
        let spread = backoff.failed(0.999);
        assert!(spread > Duration::from_secs(15) && spread < Duration::from_millis(16_875));
        backoff.succeeded();
        assert_eq!(backoff.failed(0.0), Duration::from_secs(1));
    }

    #[test]
    fn the_log_limiter_lets_a_few_lines_through_a_long_outage() {
        let mut limiter = LogLimiter::new(Duration::from_secs(30));
        let start = Instant::now();
        // 50 failures a second for 60 s.
        let mut lines = Vec::new();
        for i in 0..3000u64 {
            let now = start + Duration::from_millis(i * 20);
            if let Some(left_out) = limiter.allow(now) {
                lines.push(left_out);
            }
        }
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], 0);
        assert_eq!(lines[1], 1499);
        assert!(limiter.recovered());
        assert!(!limiter.recovered(), "nothing logged since");
        assert_eq!(limiter.allow(start), Some(0), "a new streak logs at once");
    }
}
