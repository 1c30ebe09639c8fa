//! The xDS fan-out figure: how long an intention change takes to reach N delta ADS streams,
//! what the control plane spends per streamed update, and what a connected stream costs.
//!
//! Against a running agent (started by the caller, `-dev`, gRPC on): registers `--proxies`
//! sidecar proxies of service `db`, opens `--streams` delta streams spread over them (one
//! connection each, as Envoy does), subscribes and ACKs as Envoy does until every stream is
//! synced, samples the agent's RSS (memory per stream), then `--rounds` times writes a
//! `service-intentions` entry for `db` (`* → db`, deny then allow, alternating) and times
//! each stream's listener update from the write's HTTP response (the write is committed and
//! applied when its response arrives). The agent's CPU time (utime + stime from
//! `/proc/<pid>/stat`) over each round, divided by the updates streamed, is the CPU per
//! streamed update. Every wait is bounded.
//!
//! `cargo bench --bench xds_fanout -- --http 127.0.0.1:8500 --grpc 127.0.0.1:8502 --pid N`
//! (see docs/benchmarks.md for the sitting and its baseline).

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{
    aggregated_discovery_service_client::AggregatedDiscoveryServiceClient, DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// How long all streams may take to sync, and one round to reach them all.
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between rounds, so a round's tail does not overlap the next write.
const ROUND_GAP: Duration = Duration::from_secs(2);

struct Args {
    http: SocketAddr,
    grpc: SocketAddr,
    pid: u32,
    streams: usize,
    proxies: usize,
    rounds: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        http: "127.0.0.1:8500".parse().unwrap(),
        grpc: "127.0.0.1:8502".parse().unwrap(),
        pid: 0,
        streams: 2000,
        proxies: 100,
        rounds: 5,
    };
    let list: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < list.len() {
        let value = list.get(i + 1).cloned().unwrap_or_default();
        match list[i].as_str() {
            "--http" => args.http = value.parse().expect("--http ip:port"),
            "--grpc" => args.grpc = value.parse().expect("--grpc ip:port"),
            "--pid" => args.pid = value.parse().expect("--pid N"),
            "--streams" => args.streams = value.parse().expect("--streams N"),
            "--proxies" => args.proxies = value.parse().expect("--proxies N"),
            "--rounds" => args.rounds = value.parse().expect("--rounds N"),
            // `cargo bench` passes `--bench`.
            "--bench" => {
                i += 1;
                continue;
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    assert!(args.pid > 0, "--pid of the agent is required");
    assert!(args.proxies > 0 && args.streams >= args.proxies);
    args
}

/// One HTTP/1.1 request with `Connection: close`; the answer's status and body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn proc_stat(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the agent's stat");
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 after the command.
    (fields[11].parse().unwrap(), fields[12].parse().unwrap())
}

fn cpu_ms(pid: u32) -> f64 {
    let (user, system) = proc_stat(pid);
    // SAFETY: sysconf reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (user + system) as f64 * 1000.0 / ticks
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Opens one stream and syncs it; then reports every later listener update's arrival time
/// on `updates` until the round channel closes.
async fn run_stream(
    grpc: SocketAddr,
    proxy_id: String,
    synced: mpsc::Sender<()>,
    updates: mpsc::UnboundedSender<Instant>,
) -> Result<(), String> {
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{grpc}"))
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::unbounded_channel::<DeltaDiscoveryRequest>();
    let node = Node {
        id: proxy_id,
        cluster: "db".into(),
        ..Default::default()
    };
    tx.send(DeltaDiscoveryRequest {
        node: Some(node),
        type_url: CDS.into(),
        ..Default::default()
    })
    .unwrap();
    tx.send(DeltaDiscoveryRequest {
        type_url: LDS.into(),
        ..Default::default()
    })
    .unwrap();
    let mut inbound = client
        .delta_aggregated_resources(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let mut have_listeners = false;
    while let Some(response) = inbound.message().await.map_err(|e| e.to_string())? {
        let response: DeltaDiscoveryResponse = response;
        if response.type_url == CDS {
            let eds: Vec<String> = response
                .resources
                .iter()
                .map(|r| r.name.clone())
                .filter(|n| n != "local_app")
                .collect();
            if !eds.is_empty() {
                let _ = tx.send(DeltaDiscoveryRequest {
                    type_url: EDS.into(),
                    resource_names_subscribe: eds,
                    ..Default::default()
                });
            }
        }
        let _ = tx.send(DeltaDiscoveryRequest {
            type_url: response.type_url.clone(),
            response_nonce: response.nonce.clone(),
            ..Default::default()
        });
        if response.type_url == LDS {
            if have_listeners {
                let _ = updates.send(Instant::now());
            } else {
                have_listeners = true;
                let _ = synced.send(()).await;
            }
        }
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() {
    let args = parse_args();
    // Round 0 writes `deny`: an entry left by an earlier run could already say so, and a
    // write that changes nothing updates no stream. Start from no entry (allow in -dev).
    let (status, text) = http(args.http, "DELETE", "/v1/config/service-intentions/db", "");
    assert_eq!(status, 200, "delete the intentions of db: {text}");
    for i in 0..args.proxies {
        let body = format!(
            r#"{{"ID":"db-{i}","Name":"db","Port":{},"Connect":{{"SidecarService":{{"Port":{}}}}}}}"#,
            30000 + i,
            40000 + i
        );
        let (status, text) = http(args.http, "PUT", "/v1/agent/service/register", &body);
        assert_eq!(status, 200, "register db-{i}: {text}");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rss_before = rss_kib(args.pid);
    let (synced_tx, mut synced_rx) = mpsc::channel(args.streams);
    let (updates_tx, mut updates_rx) = mpsc::unbounded_channel();
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    runtime.block_on(async {
        for i in 0..args.streams {
            let proxy = format!("db-{}-sidecar-proxy", i % args.proxies);
            let (synced, updates, failures) =
                (synced_tx.clone(), updates_tx.clone(), failures.clone());
            let grpc = args.grpc;
            tokio::spawn(async move {
                if let Err(e) = run_stream(grpc, proxy, synced, updates).await {
                    if failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                        eprintln!("a stream failed: {e}");
                    }
                }
            });
        }
        let started = Instant::now();
        let mut synced = 0;
        while synced < args.streams {
            match tokio::time::timeout(
                SYNC_TIMEOUT.saturating_sub(started.elapsed()),
                synced_rx.recv(),
            )
            .await
            {
                Ok(Some(())) => synced += 1,
                _ => panic!(
                    "only {synced} of {} streams synced in {SYNC_TIMEOUT:?} ({} failed)",
                    args.streams,
                    failures.load(std::sync::atomic::Ordering::Relaxed)
                ),
            }
        }
        println!(
            "synced {} streams over {} proxies in {:.1} s",
            args.streams,
            args.proxies,
            started.elapsed().as_secs_f64()
        );
    });
    std::thread::sleep(ROUND_GAP);
    let rss_after = rss_kib(args.pid);
    println!(
        "agent RSS {} KiB before, {} KiB with the streams: {:.1} KiB per stream",
        rss_before,
        rss_after,
        (rss_after.saturating_sub(rss_before)) as f64 / args.streams as f64
    );
    let mut all = Vec::new();
    for round in 0..args.rounds {
        let action = if round % 2 == 0 { "deny" } else { "allow" };
        let body = format!(
            r#"{{"Kind":"service-intentions","Name":"db","Sources":[{{"Name":"*","Action":"{action}"}}]}}"#
        );
        let cpu_before = cpu_ms(args.pid);
        let (status, text) = http(args.http, "PUT", "/v1/config", &body);
        let committed = Instant::now();
        assert_eq!((status, text.trim()), (200, "true"), "the intention write");
        let mut latencies = Vec::with_capacity(args.streams);
        runtime.block_on(async {
            while latencies.len() < args.streams {
                let left = ROUND_TIMEOUT.saturating_sub(committed.elapsed());
                match tokio::time::timeout(left, updates_rx.recv()).await {
                    Ok(Some(at)) => latencies.push(at.saturating_duration_since(committed)),
                    _ => break,
                }
            }
        });
        let cpu = cpu_ms(args.pid) - cpu_before;
        latencies.sort();
        println!(
            "round {round} ({action}): {} of {} streams updated; p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; agent CPU {:.0} ms, {:.1} µs per streamed update",
            latencies.len(),
            args.streams,
            percentile(&latencies, 50.0).as_secs_f64() * 1e3,
            percentile(&latencies, 99.0).as_secs_f64() * 1e3,
            latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
            cpu,
            cpu * 1000.0 / latencies.len().max(1) as f64
        );
        all.extend(latencies);
        std::thread::sleep(ROUND_GAP);
        // Drain what arrived late so the next round counts only its own updates.
        while updates_rx.try_recv().is_ok() {}
    }
    all.sort();
    println!(
        "all rounds: {} updates; p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        all.len(),
        percentile(&all, 50.0).as_secs_f64() * 1e3,
        percentile(&all, 99.0).as_secs_f64() * 1e3,
        all.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
}
