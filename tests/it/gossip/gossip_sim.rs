//! Seeded simulations of the gossip core (virtual clock, lossy jittery network).
//!
//! The large-scale test runs `GOSSIP_SIM_NODES` nodes (default 500 for CI) for
//! `GOSSIP_SIM_MINUTES` simulated minutes (default 3 for CI; the acceptance run is
//! `GOSSIP_SIM_NODES=1000 GOSSIP_SIM_MINUTES=10`) with 5% loss and 20 ms jitter, and
//! checks:
//! - no healthy node is ever declared failed by anyone;
//! - a crashed node is marked failed by every member within the suspicion timeout
//!   plus two probe intervals of the first suspicion of it (the time from the crash
//!   itself is reported too: it adds the wait until some member happens to probe the
//!   crashed node, which SWIM's random probe order makes ~1 probe interval on average);
//! - a user event reaches every node within 3*log2(N) gossip rounds.
//!
//! `GOSSIP_SIM_SEED` replays a run.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use praetor::gossip::core::suspicion_timeout;
use praetor::gossip::sim::{NetConfig, Sim};
use praetor::gossip::{GossipConfig, GossipEvent, MemberStatus};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("GOSSIP_SIM_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_0001)
}

fn lan(name: String, ip: std::net::IpAddr, port: u16) -> GossipConfig {
    let mut c = GossipConfig::lan(name, ip, port);
    c.tags.insert("role".into(), "node".into());
    c.tags.insert("dc".into(), "dc1".into());
    c
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Builds and joins a cluster: node i joins a random earlier node, staggered.
fn bootstrap(sim: &mut Sim, n: usize, stagger: Duration) {
    for _ in 0..n {
        sim.add_node(lan);
    }
    for i in 1..n {
        let t = sim.now + stagger;
        sim.run_until(t);
        let target = (i * 7919) % i;
        sim.join(i, i as u64, &[target]);
    }
}

fn all_alive_everywhere(sim: &mut Sim, n: usize) -> bool {
    (0..n).all(|i| {
        let m = sim.node(i).members();
        m.len() == n && m.iter().all(|m| m.status == MemberStatus::Alive)
    })
}

#[test]
fn small_cluster_converges_detects_failure_and_rejoins() {
    let n = 12;
    let mut sim = Sim::new(
        seed(),
        NetConfig {
            loss: 0.05,
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(20),
        },
    );
    bootstrap(&mut sim, n, Duration::from_millis(50));
    sim.run_until(sim.now + secs(20.0));
    assert!(
        all_alive_everywhere(&mut sim, n),
        "seed {}: cluster did not converge",
        sim.seed()
    );
    assert!(sim.joins.iter().all(|&(_, _, joined)| joined == 1));

    // Crash node 5: everyone marks it failed.
    sim.crash(5);
    let crashed_at = sim.now;
    sim.run_until(sim.now + secs(30.0));
    for i in (0..n).filter(|&i| i != 5) {
        let m = sim.node(i).members();
        let five = m.iter().find(|m| m.name == "node-5").expect("still listed");
        assert_eq!(
            five.status,
            MemberStatus::Failed,
            "node {i} sees {:?} (seed {})",
            five.status,
            sim.seed()
        );
    }
    let failed_at = sim
        .events
        .iter()
        .filter(|o| matches!(&o.event, GossipEvent::MemberFailed(m) if m.name == "node-5"))
        .map(|o| o.at)
        .max()
        .expect("failure events");
    assert!(failed_at > crashed_at);

    // Restart it with fresh state: it refutes its death and is alive everywhere again.
    sim.restart_node(5, lan);
    sim.join(5, 99, &[0]);
    sim.run_until(sim.now + secs(20.0));
    assert!(
        all_alive_everywhere(&mut sim, n),
        "seed {}: rejoin failed",
        sim.seed()
    );

    // Graceful leave of node 3: left everywhere, and no failure event for it.
    sim.with_node(3, |g, now| g.leave(now, 7));
    sim.run_until(sim.now + secs(15.0));
    for i in (0..n).filter(|&i| i != 3) {
        let m = sim.node(i).members();
        let three = m.iter().find(|m| m.name == "node-3").expect("still listed");
        assert_eq!(
            three.status,
            MemberStatus::Left,
            "node {i} (seed {})",
            sim.seed()
        );
    }
    assert!(!sim
        .events
        .iter()
        .any(|o| matches!(&o.event, GossipEvent::MemberFailed(m) if m.name == "node-3")));
    // Force-leave (prune) of the failed-then-left node removes it from every list.
    sim.with_node(0, |g, now| g.force_leave(now, "node-3", true));
    sim.run_until(sim.now + secs(10.0));
    for i in (0..n).filter(|&i| i != 3) {
        let m = sim.node(i).members();
        let lt = sim.node(i).lamport_times();
        assert!(
            !m.iter().any(|m| m.name == "node-3"),
            "node {i} still lists node-3: {:?} {lt:?}",
            m.iter().find(|m| m.name == "node-3")
        );
    }
}

#[test]
fn user_events_are_delivered_once_everywhere_and_lamport_clocks_advance() {
    let n = 10;
    let mut sim = Sim::new(
        seed(),
        NetConfig {
            loss: 0.05,
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(20),
        },
    );
    bootstrap(&mut sim, n, Duration::from_millis(50));
    sim.run_until(sim.now + secs(10.0));
    let (_, before, _) = sim.node(4).lamport_times();
    sim.with_node(2, |g, now| {
        g.user_event(now, "deploy", b"v1", false).unwrap()
    });
    sim.with_node(7, |g, now| {
        g.user_event(now, "deploy", b"v2", false).unwrap()
    });
    sim.run_until(sim.now + secs(10.0));
    for i in 0..n {
        let got: Vec<&[u8]> = sim
            .events
            .iter()
            .filter(|o| o.node == i)
            .filter_map(|o| match &o.event {
                GossipEvent::User(e) if e.name == "deploy" => Some(e.payload.as_slice()),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 2, "node {i} got {got:?}");
        assert!(got.contains(&&b"v1"[..]) && got.contains(&&b"v2"[..]));
    }
    let (_, after, _) = sim.node(4).lamport_times();
    assert!(after > before);
    // Oversized events are refused.
    let now = sim.now;
    assert!(sim
        .node(0)
        .user_event(now, "big", &[0; 600], false)
        .is_err());
}

#[test]
fn joining_does_not_replay_old_events_unless_asked() {
    let mut sim = Sim::new(seed(), NetConfig::default());
    for _ in 0..4 {
        sim.add_node(lan);
    }
    sim.join(1, 1, &[0]);
    sim.run_until(secs(5.0));
    sim.with_node(0, |g, now| {
        g.user_event(now, "old", b"before", false).unwrap()
    });
    sim.run_until(secs(10.0));
    sim.join(2, 2, &[0]);
    sim.join_with(3, 3, &[0], false);
    sim.run_until(secs(20.0));
    let got = |node: usize| {
        sim.events
            .iter()
            .any(|o| o.node == node && matches!(&o.event, GossipEvent::User(e) if e.name == "old"))
    };
    assert!(got(1), "a member at the time gets the event");
    assert!(!got(2), "a Consul-style join does not replay it");
    assert!(got(3), "a replaying join (serf join -replay) does");
}

#[test]
fn coordinates_converge_towards_network_latency() {
    let n = 6;
    let mut sim = Sim::new(
        seed(),
        NetConfig {
            loss: 0.0,
            latency: Duration::from_millis(5),
            jitter: Duration::ZERO,
        },
    );
    bootstrap(&mut sim, n, Duration::from_millis(50));
    sim.run_until(sim.now + secs(120.0));
    let g0 = sim.node(0);
    let me = g0.local_coordinate();
    let others = g0.coordinates().clone();
    assert!(
        others.len() >= n - 1,
        "coordinates for {} nodes",
        others.len()
    );
    for (name, c) in &others {
        if name == "node-0" {
            continue;
        }
        let est = praetor::gossip::coordinate::distance_seconds(&me, c);
        // RTT is 10 ms (5 ms each way); Vivaldi gets within a few ms.
        assert!((est - 0.010).abs() < 0.005, "estimate to {name}: {est}");
    }
}

/// A network that loses nothing, with a little jitter.
fn lossless_sim() -> Sim {
    Sim::new(
        seed(),
        NetConfig {
            loss: 0.0,
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(2),
        },
    )
}

#[test]
fn keyring_queries_reach_every_member_and_encryption_keeps_working() {
    let n = 5;
    let key1 = vec![1u8; 16];
    let key2 = vec![2u8; 32];
    let mut sim = lossless_sim();
    for _ in 0..n {
        let k = key1.clone();
        sim.add_node(move |name, ip, port| {
            let mut c = lan(name, ip, port);
            c.keys = vec![k];
            c
        });
    }
    for i in 1..n {
        sim.join(i, i as u64, &[0]);
    }
    sim.run_until(secs(10.0));
    assert!(all_alive_everywhere(&mut sim, n));
    sim.with_node(0, |g, now| {
        g.key_op(now, 1, praetor::gossip::KeyOp::Install(key2.clone()))
    });
    sim.run_until(sim.now + secs(5.0));
    sim.with_node(0, |g, now| {
        g.key_op(now, 2, praetor::gossip::KeyOp::Use(key2.clone()))
    });
    sim.run_until(sim.now + secs(5.0));
    sim.with_node(0, |g, now| {
        g.key_op(now, 3, praetor::gossip::KeyOp::Remove(key1.clone()))
    });
    sim.run_until(sim.now + secs(5.0));
    for i in 0..n {
        assert_eq!(sim.node(i).keys(), std::slice::from_ref(&key2), "node {i}");
    }
    // Still healthy under the new key.
    sim.run_until(sim.now + secs(20.0));
    assert!(all_alive_everywhere(&mut sim, n));
}

/// One step of Consul's documented way to turn gossip encryption on in a running pool: the
/// key with both switches off, then `encrypt_verify_outgoing`, then `encrypt_verify_incoming`.
#[derive(Clone, Copy, Debug)]
enum Adoption {
    Plain,
    KeyOnly,
    Outgoing,
    Enforced,
}

fn adopting(
    stage: Adoption,
    key: Vec<u8>,
) -> impl FnOnce(String, std::net::IpAddr, u16) -> GossipConfig {
    move |name, ip, port| {
        let mut c = lan(name, ip, port);
        let (keys, incoming, outgoing) = match stage {
            Adoption::Plain => (Vec::new(), true, true),
            Adoption::KeyOnly => (vec![key], false, false),
            Adoption::Outgoing => (vec![key], false, true),
            Adoption::Enforced => (vec![key], true, true),
        };
        c.keys = keys;
        c.gossip_verify_incoming = incoming;
        c.gossip_verify_outgoing = outgoing;
        c
    }
}

#[test]
fn rolling_encryption_adoption_keeps_the_pool_whole_at_every_step() {
    let n = 5;
    let key = vec![7u8; 32];
    let mut sim = lossless_sim();
    for _ in 0..n {
        sim.add_node(adopting(Adoption::Plain, key.clone()));
    }
    for i in 1..n {
        sim.join(i, i as u64, &[0]);
    }
    sim.run_until(secs(10.0));
    assert!(all_alive_everywhere(&mut sim, n), "seed {}", sim.seed());

    // A node that enforces encryption cannot join a plaintext pool: the switches matter.
    let strict = sim.add_node(adopting(Adoption::Enforced, key.clone()));
    sim.join(strict, 500, &[0]);
    sim.run_until(sim.now + secs(5.0));
    assert!(
        sim.joins
            .iter()
            .any(|&(node, request, joined)| (node, request, joined) == (strict, 500, 0)),
        "an encrypting node joined a plaintext pool (seed {}): {:?}",
        sim.seed(),
        sim.joins
    );
    sim.crash(strict);
    sim.run_until(sim.now + secs(30.0));
    sim.with_node(0, |g, now| {
        g.force_leave(now, &format!("node-{strict}"), true)
    });
    sim.run_until(sim.now + secs(5.0));
    let failures_before = failed_events(&sim);

    // Each stage is rolled through the pool one restart at a time; after every restart the
    // mixed pool (this stage and the one before) is whole.
    let mut request = 1000;
    for stage in [Adoption::KeyOnly, Adoption::Outgoing, Adoption::Enforced] {
        for i in 0..n {
            sim.crash(i);
            sim.restart_node(i, adopting(stage, key.clone()));
            request += 1;
            sim.join(i, request, &[(i + 1) % n]);
            sim.run_until(sim.now + secs(8.0));
            assert!(
                (0..n).all(|j| {
                    let m = sim.node(j).members();
                    m.iter()
                        .filter(|m| m.name != format!("node-{strict}"))
                        .all(|m| m.status == MemberStatus::Alive)
                        && m.iter().filter(|m| m.status == MemberStatus::Alive).count() == n
                }),
                "{stage:?}: the pool split after restarting node {i} (seed {})",
                sim.seed()
            );
        }
    }
    assert_eq!(
        failed_events(&sim),
        failures_before,
        "a member was declared failed during the rollout (seed {})",
        sim.seed()
    );
    // The pool now encrypts everything: a node without the key cannot join it.
    let keyless = sim.add_node(adopting(Adoption::Plain, key.clone()));
    sim.join(keyless, 900, &[0]);
    sim.run_until(sim.now + secs(5.0));
    assert!(
        sim.joins
            .iter()
            .any(|&(node, request, joined)| (node, request, joined) == (keyless, 900, 0)),
        "a node without the key joined an encrypted pool (seed {})",
        sim.seed()
    );
}

fn failed_events(sim: &Sim) -> usize {
    sim.events
        .iter()
        .filter(|o| matches!(&o.event, GossipEvent::MemberFailed(_)))
        .count()
}

#[test]
fn large_cluster_under_loss_and_jitter() {
    let n = env_usize("GOSSIP_SIM_NODES", 500);
    let minutes = env_usize("GOSSIP_SIM_MINUTES", 3);
    let wall = Instant::now();
    let mut sim = Sim::new(
        seed(),
        NetConfig {
            loss: 0.05,
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(20),
        },
    );
    bootstrap(&mut sim, n, Duration::from_millis(20));
    let settled = sim.now + secs(60.0);
    sim.run_until(settled);
    let converged = (0..n).filter(|&i| sim.node(i).members().len() == n).count();
    eprintln!(
        "[sim] {n} nodes bootstrapped at {:?}; {converged}/{n} know everyone; wall {:?}",
        sim.now,
        wall.elapsed()
    );
    assert_eq!(converged, n, "seed {}", sim.seed());

    let start = sim.now;
    let bytes_at_start = sim.bytes_sent;
    let steady_wall = Instant::now();
    let end = start + Duration::from_secs(60 * minutes as u64);
    let cfg = GossipConfig::lan("x", "127.0.0.1".parse().unwrap(), 1);

    // A broadcast a third of the way in.
    let event_at = start + (end - start) / 3;
    sim.run_until(event_at);
    sim.with_node(1, |g, now| {
        g.user_event(now, "sim-broadcast", b"x", false).unwrap()
    });
    // A crash at two thirds.
    let crash_at = start + (end - start) * 2 / 3;
    sim.run_until(crash_at);
    let victim = n / 2;
    let victim_name = format!("node-{victim}");
    sim.crash(victim);
    // Sample every member's view every 50 ms to find the first suspicion.
    let mut first_suspected: Option<Duration> = None;
    while first_suspected.is_none() && sim.now < crash_at + secs(60.0) {
        let t = sim.now + Duration::from_millis(50);
        sim.run_until(t);
        let any = (0..n).filter(|&i| i != victim).any(|i| {
            sim.node(i).node_state(&victim_name).is_some_and(|(st, _)| {
                st != praetor::proto::gossip::memberlist::NodeStateKind::Alive
            })
        });
        if any {
            first_suspected = Some(sim.now);
        }
    }
    let first_suspected = first_suspected.expect("the crashed node was never suspected");
    sim.run_until(end);
    let bytes = sim.bytes_sent;
    let steady_bytes = bytes - bytes_at_start;
    eprintln!(
        "[sim] ran {minutes} simulated minutes; wall {:?}; {} packets delivered, {} dropped, {} bytes sent",
        wall.elapsed(),
        sim.packets_delivered,
        sim.packets_dropped,
        bytes
    );

    // 1. No healthy node was ever declared failed.
    let false_failures: Vec<_> = sim
        .events
        .iter()
        .filter_map(|o| match &o.event {
            GossipEvent::MemberFailed(m) if m.name != victim_name => {
                Some((o.at, o.node, m.name.clone()))
            }
            _ => None,
        })
        .collect();
    assert!(
        false_failures.is_empty(),
        "seed {}: healthy nodes declared failed: {:?}",
        sim.seed(),
        &false_failures[..false_failures.len().min(10)]
    );

    // 2. Every live member marked the victim failed, quickly.
    let mut failed_at: HashMap<usize, Duration> = HashMap::new();
    for o in &sim.events {
        if let GossipEvent::MemberFailed(m) = &o.event {
            if m.name == victim_name {
                failed_at.entry(o.node).or_insert(o.at);
            }
        }
    }
    let live: Vec<usize> = (0..n).filter(|&i| i != victim).collect();
    let missing: Vec<usize> = live
        .iter()
        .copied()
        .filter(|i| !failed_at.contains_key(i))
        .collect();
    assert!(
        missing.is_empty(),
        "seed {}: {} members never marked the victim failed",
        sim.seed(),
        missing.len()
    );
    let last = failed_at.values().max().copied().unwrap_or_default();
    let first = failed_at.values().min().copied().unwrap_or_default();
    let bound =
        suspicion_timeout(cfg.suspicion_mult, n, cfg.probe_interval) + cfg.probe_interval * 2;
    eprintln!(
        "[sim] crash of {victim_name}: first suspected {:?} after the crash; marked failed by the first member {:?} and by all {} live members {:?} after the first suspicion ({:?} after the crash); bound {:?}",
        first_suspected - crash_at,
        first - first_suspected,
        live.len(),
        last - first_suspected,
        last - crash_at,
        bound
    );
    assert!(
        last - first_suspected <= bound,
        "seed {}: detection took {:?} after the first suspicion",
        sim.seed(),
        last - first_suspected
    );

    // 3. The broadcast reached every node within 3*log2(N) gossip rounds.
    let mut got: HashSet<usize> = HashSet::new();
    let mut latest = Duration::ZERO;
    for o in &sim.events {
        if let GossipEvent::User(e) = &o.event {
            if e.name == "sim-broadcast" && got.insert(o.node) {
                latest = latest.max(o.at - event_at);
            }
        }
    }
    let rounds = latest.as_secs_f64() / cfg.gossip_interval.as_secs_f64();
    let allowed = 3.0 * (n as f64).log2();
    eprintln!("[sim] broadcast reached {}/{} nodes in {:?} = {rounds:.1} gossip rounds (allowed {allowed:.1})", got.len(), n, latest);
    assert_eq!(
        got.len(),
        n - if victim == 1 { 1 } else { 0 },
        "seed {}",
        sim.seed()
    );
    assert!(
        rounds <= allowed,
        "seed {}: broadcast took {rounds:.1} rounds",
        sim.seed()
    );

    let steady_secs = (end - start).as_secs_f64();
    eprintln!(
        "[sim] steady state: {:.0} bytes sent per member per simulated second; {:.1} us of simulator CPU per member per simulated second",
        steady_bytes as f64 / n as f64 / steady_secs,
        steady_wall.elapsed().as_secs_f64() * 1e6 / n as f64 / steady_secs
    );
}

// ---------------------------------------------------------------------------------------
// Graceful leaves and restarts under churn (issue #25 item 4).

/// Members 0..CHURN_SERVERS never leave and are the join targets, as Consul servers are.
const CHURN_SERVERS: usize = 3;
/// A new round of leaves starts this often.
const CHURN_ROUND_PERIOD: Duration = Duration::from_secs(2);
/// The leaves of one round start spread over this long.
const CHURN_LEAVE_SPREAD_MILLIS: u64 = 1000;
/// After its restart a member rests this long before it may leave again (longer than
/// `CHURN_ALIVE_BOUND`, so a restart is judged before the next leave starts).
const CHURN_REST: Duration = Duration::from_secs(4);
/// The real agent exits this long after its leave finished.
const CHURN_EXIT_DELAY: Duration = Duration::from_millis(200);
/// A member that left is started again after a pause in this range (milliseconds).
const CHURN_DOWN_MILLIS: std::ops::Range<u64> = 500..2000;
/// Every view must show a leaver `left` this long after its leave started. serf's leave
/// intent goes out at once and the memberlist "left" broadcast follows as soon as the
/// intent has been sent; 3 s is also the real-process test's bound.
const CHURN_LEFT_BOUND: Duration = Duration::from_secs(3);
/// Every view must show a restarted member `alive` this long after it started again: a
/// push/pull with a server, a refutation, and the alive broadcast spreading in
/// O(log n) gossip rounds.
const CHURN_ALIVE_BOUND: Duration = Duration::from_secs(3);
/// The simulator is advanced at most this much between scenario actions.
const CHURN_STEP: Duration = Duration::from_millis(50);
/// The pool must know every member this long after the last one joined.
const CHURN_SETTLE_LIMIT: Duration = Duration::from_secs(30);
/// A churn run that has not finished its leaves this long after its last round failed.
const CHURN_DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// A leave-and-restart cycle of one member in the churn scenario.
#[derive(Debug, Clone)]
struct Cycle {
    node: usize,
    leave_started: Duration,
    leave_done: Option<Duration>,
    restarted: Option<Duration>,
    moved: bool,
}

/// What a churn run measured: the worst time a view took to show a leaver `left` after
/// its leave started, and a restarted member `alive` after its restart (from the
/// membership events), over all cycles.
#[derive(Debug, Default)]
struct ChurnReport {
    cycles: usize,
    worst_left: Duration,
    worst_alive: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ChurnAction {
    Leave,
    Exit,
    Restart,
    CheckLeft,
    CheckAlive,
}

/// Consul's LAN pool timings (3 s leave propagation delay, 30 s dead-node reclaim).
fn consul_lan(name: String, ip: std::net::IpAddr, port: u16) -> GossipConfig {
    let mut c = GossipConfig::consul_lan(name, ip, port);
    c.tags.insert("role".into(), "node".into());
    c.tags.insert("dc".into(), "dc1".into());
    c
}

/// Whether `node` was leaving, down or freshly restarted at some point in `[from, to]`
/// (its own view is then not judged).
fn cycling(cycles: &[Cycle], node: usize, from: Duration, to: Duration) -> bool {
    cycles.iter().any(|c| {
        c.node == node
            && c.leave_started <= to
            && c.restarted.is_none_or(|r| r + CHURN_REST >= from)
    })
}

/// `members` members on a jittery network (1 ms latency, up to 10 ms extra: packets
/// reorder). Every round, `per_round` idle clients leave gracefully, exit, and come back
/// 0.5–2 s later on their data dir (same name, a fresh process whose incarnation and
/// Lamport clocks start again), one in four on a new address, joining through a server.
/// Cycles overlap, so leaves, restarts and joins race each other in every view.
///
/// Checked: no view ever shows anyone `failed` (nobody is killed); every member that is
/// not cycling itself shows each leaver `left` `CHURN_LEFT_BOUND` after its leave
/// started and each restarted member `alive` `CHURN_ALIVE_BOUND` after its restart; in
/// the end every view lists every member alive at its current address.
fn churn(members: usize, seed: u64, rounds: u32, per_round: usize) -> ChurnReport {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    let mut sim = Sim::new(
        seed,
        NetConfig {
            loss: 0.0,
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(10),
        },
    );
    let mut rng = StdRng::seed_from_u64(seed.rotate_left(17) ^ 0xc4c4);
    for _ in 0..members {
        sim.add_node(consul_lan);
    }
    for i in 1..members {
        let t = sim.now + Duration::from_millis(10);
        sim.run_until(t);
        sim.join(i, i as u64, &[i % CHURN_SERVERS.min(i)]);
    }
    let settle_by = sim.now + CHURN_SETTLE_LIMIT;
    while !(0..members).all(|i| sim.node(i).members().len() == members) {
        assert!(
            sim.now < settle_by,
            "seed {seed}: the pool did not converge"
        );
        sim.run_until(sim.now + secs(1.0));
    }
    sim.events.clear();
    let start = sim.now;

    let mut cycles: Vec<Cycle> = Vec::new();
    // Per member: the cycle it is in, and since when it is back.
    let mut in_cycle: Vec<Option<usize>> = vec![None; members];
    let mut back_since: Vec<Duration> = vec![Duration::ZERO; members];
    let mut pending: Vec<(Duration, usize, ChurnAction)> = Vec::new();
    let mut violations: Vec<String> = Vec::new();
    let mut leaves_seen = 0;
    let mut request = 1_000_000u64;
    let end_of_rounds = start + CHURN_ROUND_PERIOD * rounds;
    let mut next_round = start;
    loop {
        if sim.now >= next_round && next_round < end_of_rounds {
            let mut idle: Vec<usize> = (CHURN_SERVERS..members)
                .filter(|&i| in_cycle[i].is_none() && sim.now >= back_since[i] + CHURN_REST)
                .collect();
            for _ in 0..per_round.min(idle.len()) {
                let node = idle.swap_remove(rng.random_range(0..idle.len()));
                let at =
                    sim.now + Duration::from_millis(rng.random_range(0..CHURN_LEAVE_SPREAD_MILLIS));
                cycles.push(Cycle {
                    node,
                    leave_started: at,
                    leave_done: None,
                    restarted: None,
                    moved: false,
                });
                let c = cycles.len() - 1;
                in_cycle[node] = Some(c);
                pending.push((at, c, ChurnAction::Leave));
                pending.push((at + CHURN_LEFT_BOUND, c, ChurnAction::CheckLeft));
            }
            next_round += CHURN_ROUND_PERIOD;
        }
        // A finished leave: the agent exits shortly after.
        while leaves_seen < sim.leaves.len() {
            let (node, _, at) = sim.leaves[leaves_seen];
            leaves_seen += 1;
            let c = in_cycle[node].expect("only cycling members leave");
            cycles[c].leave_done = Some(at);
            pending.push((at + CHURN_EXIT_DELAY, c, ChurnAction::Exit));
        }
        pending.sort_by_key(|p| p.0);
        while pending.first().is_some_and(|p| p.0 <= sim.now) {
            let (_, c, action) = pending.remove(0);
            let node = cycles[c].node;
            let name = format!("node-{node}");
            match action {
                ChurnAction::Leave => {
                    request += 1;
                    let r = request;
                    sim.with_node(node, |g, now| g.leave(now, r));
                }
                ChurnAction::Exit => {
                    sim.crash(node);
                    let down = Duration::from_millis(rng.random_range(CHURN_DOWN_MILLIS));
                    pending.push((sim.now + down, c, ChurnAction::Restart));
                }
                ChurnAction::Restart => {
                    let moved = rng.random_range(0..4) == 0;
                    if moved {
                        sim.restart_node_moved(node, consul_lan);
                    } else {
                        sim.restart_node(node, consul_lan);
                    }
                    request += 1;
                    let server = rng.random_range(0..CHURN_SERVERS);
                    sim.join(node, request, &[server]);
                    cycles[c].restarted = Some(sim.now);
                    cycles[c].moved = moved;
                    in_cycle[node] = None;
                    back_since[node] = sim.now;
                    pending.push((sim.now + CHURN_ALIVE_BOUND, c, ChurnAction::CheckAlive));
                }
                ChurnAction::CheckLeft | ChurnAction::CheckAlive => {
                    let (want, since) = match action {
                        ChurnAction::CheckLeft => (MemberStatus::Left, cycles[c].leave_started),
                        _ => (
                            MemberStatus::Alive,
                            cycles[c].restarted.expect("checked after the restart"),
                        ),
                    };
                    for observer in (0..members).filter(|&o| o != node) {
                        if cycling(&cycles, observer, since, sim.now) {
                            continue;
                        }
                        let seen = sim.node(observer).member(&name).map(|m| m.status);
                        if seen != Some(want) {
                            violations.push(format!(
                                "node-{observer} shows {name} {seen:?} {:?} after its {}; cycle {:?}",
                                sim.now - since,
                                if want == MemberStatus::Left { "leave started" } else { "restart" },
                                cycles[c]
                            ));
                        }
                    }
                }
            }
        }
        if sim.now >= end_of_rounds && pending.is_empty() && in_cycle.iter().all(Option::is_none) {
            break;
        }
        assert!(
            sim.now < end_of_rounds + CHURN_DRAIN_LIMIT,
            "seed {seed}: leaves did not finish: {pending:?}"
        );
        let next = pending
            .iter()
            .map(|p| p.0)
            .fold(sim.now + CHURN_STEP, Duration::min)
            .max(sim.now + Duration::from_millis(1));
        sim.run_until(next);
    }
    sim.run_until(sim.now + secs(5.0));

    let failed: Vec<String> = sim
        .events
        .iter()
        .filter_map(|o| match &o.event {
            GossipEvent::MemberFailed(m) => Some(format!(
                "node-{} showed {} failed {:?} into the run",
                o.node,
                m.name,
                o.at - start
            )),
            _ => None,
        })
        .collect();
    assert!(
        failed.is_empty(),
        "seed {seed}, {members} members: {} views showed a member failed, nobody was killed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(
        violations.is_empty(),
        "seed {seed}, {members} members: {} late views: {:?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
    for observer in 0..members {
        let view = sim.node(observer).members();
        assert_eq!(view.len(), members, "seed {seed}: node-{observer}'s view");
        for m in &view {
            let i: usize = m.name["node-".len()..].parse().expect("sim names");
            assert_eq!(
                (m.status, std::net::SocketAddr::new(m.addr, m.port)),
                (MemberStatus::Alive, sim.addrs[i]),
                "seed {seed}: node-{observer}'s view of {} in the end",
                m.name
            );
        }
    }

    let mut report = ChurnReport {
        cycles: cycles.len(),
        ..Default::default()
    };
    for c in &cycles {
        let name = format!("node-{}", c.node);
        let restarted = c.restarted.unwrap_or_default();
        let left_by = c.leave_started + CHURN_LEFT_BOUND;
        let alive_by = restarted + CHURN_ALIVE_BOUND;
        for o in &sim.events {
            match &o.event {
                GossipEvent::MemberLeave(m)
                    if m.name == name
                        && (c.leave_started..=left_by).contains(&o.at)
                        && !cycling(&cycles, o.node, c.leave_started, left_by) =>
                {
                    report.worst_left = report.worst_left.max(o.at - c.leave_started);
                }
                GossipEvent::MemberJoin(m)
                    if m.name == name
                        && (restarted..=alive_by).contains(&o.at)
                        && !cycling(&cycles, o.node, restarted, alive_by) =>
                {
                    report.worst_alive = report.worst_alive.max(o.at - restarted);
                }
                _ => {}
            }
        }
    }
    report
}

fn churn_seeds(members: usize, seeds: u64, rounds: u32, per_round: usize) {
    let base = seed();
    for s in 0..seeds {
        let wall = Instant::now();
        let r = churn(members, base + s, rounds, per_round);
        eprintln!(
            "[sim] churn, {members} members, seed {}: {} leave/restart cycles; views showed \
             leavers left within {:?} and restarted members alive within {:?}; wall {:?}",
            base + s,
            r.cycles,
            r.worst_left,
            r.worst_alive,
            wall.elapsed()
        );
    }
}

#[test]
fn churn_50_members_leavers_are_left_and_restarts_alive_in_every_view() {
    churn_seeds(50, env_usize("GOSSIP_SIM_CHURN_SEEDS", 8) as u64, 20, 3);
}

#[test]
fn churn_200_members_leavers_are_left_and_restarts_alive_in_every_view() {
    let seeds = env_usize("GOSSIP_SIM_CHURN_SEEDS", 8).div_ceil(4) as u64;
    churn_seeds(200, seeds, 15, 6);
}

#[test]
fn churn_500_members_leavers_are_left_and_restarts_alive_in_every_view() {
    churn_seeds(500, 1, 6, 10);
}
