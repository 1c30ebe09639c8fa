//! Cost of gossip at scale: CPU time and bytes per member per simulated second for a
//! steady-state pool of `GOSSIP_BENCH_NODES` members (default 1000) under 5% loss and
//! 20 ms jitter, measured on the seeded simulator (every node's full encode/decode,
//! compression and state machine runs; only sockets are simulated).
//!
//! One iteration advances the whole pool by one simulated second. Criterion reports
//! the time per iteration; divide by the member count for CPU per member per second
//! (the figure printed at the end does that, with bytes per member per second).
//! The baseline printed alongside is the same pool with compression disabled.
//!
//! Run: `cargo bench --bench gossip_sim` (bootstrapping 1000 members takes ~2 minutes).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use praetor::gossip::sim::{NetConfig, Sim};
use praetor::gossip::GossipConfig;

fn nodes() -> usize {
    std::env::var("GOSSIP_BENCH_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn build(n: usize, compression: bool) -> Sim {
    let mut sim = Sim::new(
        42,
        NetConfig {
            loss: 0.05,
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(20),
        },
    );
    sim.record_events = false;
    for _ in 0..n {
        sim.add_node(|name, ip, port| {
            let mut c = GossipConfig::lan(name, ip, port);
            c.tags.insert("role".into(), "node".into());
            c.tags.insert("dc".into(), "dc1".into());
            c.enable_compression = compression;
            c
        });
    }
    for i in 1..n {
        let t = sim.now + Duration::from_millis(20);
        sim.run_until(t);
        sim.join(i, i as u64, &[(i * 7919) % i]);
    }
    let t = sim.now + Duration::from_secs(60);
    sim.run_until(t);
    sim
}

fn bench(c: &mut Criterion) {
    let n = nodes();
    let mut report = Vec::new();
    for (label, compression) in [("lzw", true), ("no_compression", false)] {
        let built = Instant::now();
        let mut sim = build(n, compression);
        eprintln!(
            "[bench] {label}: bootstrapped {n} members in {:?}",
            built.elapsed()
        );
        let bytes_before = sim.bytes_sent;
        let sim_before = sim.now;
        let mut cpu = Duration::ZERO;
        let mut group = c.benchmark_group("gossip_steady_state");
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(20));
        group.bench_function(format!("{n}_members_one_sim_second_{label}"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let t = sim.now + Duration::from_secs(1);
                    sim.run_until(t);
                }
                let e = start.elapsed();
                cpu += e;
                e
            })
        });
        group.finish();
        let sim_secs = (sim.now - sim_before).as_secs_f64();
        report.push(format!(
            "[bench] {label}: {n} members: {:.1} us CPU and {:.0} bytes sent per member per second ({sim_secs:.0} simulated seconds measured)",
            cpu.as_secs_f64() * 1e6 / n as f64 / sim_secs,
            (sim.bytes_sent - bytes_before) as f64 / n as f64 / sim_secs
        ));
    }
    for r in report {
        eprintln!("{r}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
