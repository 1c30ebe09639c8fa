//! The `blocking-fanout` scenario: park N blocking queries, do one write, time the wake-ups.
//!
//! 1. Read the current `X-Consul-Index` of the watched path (and of the `--others` path).
//! 2. Open one connection per watcher — spread over `--source-addrs`, or automatically over
//!    127.0.0.40… above [`AUTO_SPREAD_ABOVE`] loopback connections — and send each its
//!    `?index=<current>&wait=<--wait>` query. Once every query is written, wait `--settle`
//!    so the server has read them all, then sample the server's RSS (`--rss-pid`).
//! 3. Perform ONE write on a connection opened beforehand, and note when its response
//!    arrived. Every watcher's wake-up latency is the time from that response to the watcher's
//!    complete answer (clamped at zero; answers that beat the write's response are counted).
//! 4. Wait until all watchers answered or `--wake-timeout`, then `--others-grace` more, and
//!    count `--others` watchers that woke: a write to one key or service must not wake them.
//!
//! Every phase is bounded; nothing here waits without a deadline.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use monoio::net::TcpStream;
use serde_json::{json, Map};

use crate::config::{RegisterVia, RunConfig, WatchKind};
use crate::engine::{block_on, group_digits, ThreadStats};
use crate::hist::LatencyHistogram;
use crate::http::{encode_path, encode_request};
use crate::httprun::HttpConn;
use crate::net::{connect_tcp, vm_rss_kib, Target};
use crate::report::RunResult;
use crate::setup::{register_instances, BlockingClient};

/// Above this many loopback connections, and without `--source-addrs`, connections are
/// spread over 127.0.0.40… so no source address carries more than [`CONNECTIONS_PER_SOURCE`].
pub const AUTO_SPREAD_ABOVE: usize = 15_000;
/// Connections per source address when spreading automatically.
const CONNECTIONS_PER_SOURCE: usize = 10_000;
/// First automatic source address (loadgen's range is 127.0.0.40-127.0.0.99).
const AUTO_SOURCE_FIRST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 40);
/// Most automatic source addresses.
const AUTO_SOURCES_MAX: usize = 60;
/// Read buffer per parked connection, touched when it connects: large enough to take a
/// typical answer (an 8 KiB pretty-printed health list) in one read, so the client spends
/// as little of the shared cores as it can while the answers arrive.
const WATCHER_READ_BYTES: usize = 16 * 1024;
/// How often worker threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(5);
/// Bound on opening and parking all connections: this much per thousand watchers, plus a base.
const PARK_TIME_PER_THOUSAND: Duration = Duration::from_secs(2);
const PARK_TIME_BASE: Duration = Duration::from_secs(10);

/// One watcher's fate.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    is_other: bool,
    /// Connected and its query written.
    parked: bool,
    answered_at: Option<Instant>,
    status: u16,
    index: Option<u64>,
    failed: bool,
}

/// State shared between the orchestrating main thread and the workers.
#[derive(Default)]
struct Control {
    parked: AtomicUsize,
    failed_to_park: AtomicUsize,
    answered: AtomicUsize,
    answered_others: AtomicUsize,
    stop: AtomicBool,
}

/// The paths a run watches and the write it performs.
struct Plan {
    watch_path: String,
    other_path: String,
    write_method: String,
    write_path: String,
    write_body: String,
}

fn plan(config: &RunConfig) -> Plan {
    let health = |service: &str| format!("/v1/health/service/{}", encode_path(service));
    let passing = config.effective_passing();
    let with_passing = |path: String| {
        if passing {
            format!("{path}?passing")
        } else {
            path
        }
    };
    let (watch_path, other_path) = match config.watch {
        WatchKind::Key => (
            format!("/v1/kv/{}", encode_path(&config.key)),
            format!("/v1/kv/{}", encode_path(&config.other_key)),
        ),
        WatchKind::Prefix => (
            format!("/v1/kv/{}?recurse", encode_path(&config.key)),
            format!("/v1/kv/{}?recurse", encode_path(&config.other_key)),
        ),
        WatchKind::Health => (
            with_passing(health(&config.service)),
            with_passing(health(&config.other_service)),
        ),
    };
    let stamp = format!("fanout-{}", std::process::id());
    let (method, path, body) = match config.watch {
        WatchKind::Key => (
            "PUT".to_string(),
            format!("/v1/kv/{}", encode_path(&config.key)),
            stamp,
        ),
        WatchKind::Prefix => {
            let sep = if config.key.ends_with('/') { "" } else { "/" };
            (
                "PUT".to_string(),
                format!("/v1/kv/{}{sep}fanout-write", encode_path(&config.key)),
                stamp,
            )
        }
        WatchKind::Health => match &config.check_id {
            Some(id) => (
                "PUT".to_string(),
                format!("/v1/agent/check/fail/{}", encode_path(id)),
                String::new(),
            ),
            None => {
                // A new instance of the watched service: changes its health result.
                let id = format!("{}-fanout-write", config.service);
                let node = "loadgen-fanout-write".to_string();
                let instance = crate::workloads::Instance {
                    service: &config.service,
                    id: &id,
                    node: &node,
                    node_index: 999_999,
                    index: 999_999,
                };
                let (path, body) = crate::workloads::registration(RegisterVia::Catalog, &instance);
                ("PUT".to_string(), path.to_string(), body)
            }
        },
    };
    Plan {
        watch_path,
        other_path,
        write_method: config.write_method.clone().unwrap_or(method),
        write_path: config.write_path.clone().unwrap_or(path),
        write_body: config.write_body.clone().unwrap_or(body),
    }
}

/// Which of `total` watchers are `others`: exactly `others` of them, at positions shuffled
/// with a fixed seed so they spread over threads and source addresses like the rest.
fn other_flags(total: usize, others: usize) -> Vec<bool> {
    let mut flags: Vec<bool> = (0..total).map(|i| i < others).collect();
    let mut rng = crate::workloads::XorShift::new(0x5eed);
    for i in (1..total).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        flags.swap(i, j);
    }
    flags
}

/// Appends `index` and `wait` to a path that may already have a query string.
fn blocking_path(path: &str, index: u64, wait: Duration) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}index={index}&wait={}ms", wait.as_millis())
}

/// Reads the current index of `path`; 404 is fine (a missing key still has an index).
fn current_index(client: &mut BlockingClient, path: &str) -> Result<u64, String> {
    let response = client.request("GET", path, None, b"")?;
    if !(200..300).contains(&response.status) && response.status != 404 {
        return Err(format!(
            "GET {path} answered {}: {}",
            response.status,
            response.body_text()
        ));
    }
    response.consul_index.ok_or_else(|| {
        format!("GET {path} has no X-Consul-Index header: not a Consul-compatible API?")
    })
}

/// The source addresses to use for `total` connections.
fn sources(config: &RunConfig, target: &Target, total: usize) -> Vec<Ipv4Addr> {
    if !config.source_addrs.is_empty()
        || total <= AUTO_SPREAD_ABOVE
        || !target.addr.ip().is_loopback()
    {
        return config.source_addrs.clone();
    }
    let count = total.div_ceil(CONNECTIONS_PER_SOURCE).min(AUTO_SOURCES_MAX);
    let first = u32::from(AUTO_SOURCE_FIRST);
    (0..count as u32)
        .map(|i| Ipv4Addr::from(first + i))
        .collect()
}

pub fn run_fanout(config: &RunConfig, target: &Target) -> Result<RunResult, String> {
    let total = config.watchers + config.others;
    crate::net::check_fd_budget(total + 2)?;
    let plan = plan(config);
    let mut setup = BlockingClient::new(target, config.timeout);
    if config.instances > 0 && config.watch == WatchKind::Health {
        register_instances(config, target, &config.service, config.instances)?;
        if config.others > 0 {
            register_instances(config, target, &config.other_service, config.instances)?;
        }
    }
    let index = current_index(&mut setup, &plan.watch_path)?;
    let other_index = if config.others > 0 {
        current_index(&mut setup, &plan.other_path)?
    } else {
        0
    };
    let watch_request = blocking_path(&plan.watch_path, index, config.wait);
    let other_request = blocking_path(&plan.other_path, other_index, config.wait);
    let source_addrs = sources(config, target, total);
    if source_addrs.len() > 1 && config.source_addrs.is_empty() && config.progress {
        eprintln!(
            "[fanout] spreading {} connections over {} source addresses {}…",
            group_digits(total as u64),
            source_addrs.len(),
            source_addrs[0]
        );
    }
    let mut writer = BlockingClient::new(target, config.timeout);
    writer.connect()?;
    let rss_before = config.rss_pid.and_then(vm_rss_kib);

    let threads = config.effective_threads();
    let other_flags = other_flags(total, config.others);
    let control = Arc::new(Control::default());
    let park_started = Instant::now();
    let mut write_outcome: Result<(u16, Instant, Instant), String> = Err("not performed".into());
    let mut rss_after = None;
    let mut parked_at = None;
    let per_thread: Vec<Vec<Outcome>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let control = control.clone();
                let source_addrs = &source_addrs;
                let other_flags = &other_flags;
                let watch_request = &watch_request;
                let other_request = &other_request;
                scope.spawn(move || {
                    block_on(
                        config.io_driver,
                        worker(
                            config,
                            target,
                            t,
                            threads,
                            control,
                            other_flags,
                            source_addrs,
                            watch_request,
                            other_request,
                        ),
                    )
                    .unwrap_or_else(|e| {
                        eprintln!("[fanout] worker {t}: runtime: {e}");
                        Vec::new()
                    })
                })
            })
            .collect();

        // Phase 2: wait until every watcher is parked or failed, within a bound.
        let park_deadline =
            park_started + PARK_TIME_BASE + PARK_TIME_PER_THOUSAND * (total as u32).div_ceil(1000);
        let mut next_report = Instant::now() + Duration::from_secs(1);
        loop {
            let done = control.parked.load(Ordering::Relaxed)
                + control.failed_to_park.load(Ordering::Relaxed);
            if done >= total || Instant::now() >= park_deadline {
                break;
            }
            if config.progress && Instant::now() >= next_report {
                eprintln!(
                    "[fanout] parked {} / {}",
                    group_digits(control.parked.load(Ordering::Relaxed) as u64),
                    group_digits(total as u64)
                );
                next_report += Duration::from_secs(1);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        parked_at = Some(Instant::now());
        if config.progress {
            eprintln!(
                "[fanout] parked {} / {} in {:.2}s ({} failed); settling {:?}",
                group_digits(control.parked.load(Ordering::Relaxed) as u64),
                group_digits(total as u64),
                park_started.elapsed().as_secs_f64(),
                control.failed_to_park.load(Ordering::Relaxed),
                config.settle
            );
        }
        std::thread::sleep(config.settle);
        rss_after = config.rss_pid.and_then(vm_rss_kib);

        // Phase 3: the one write.
        write_outcome = perform_write(&mut writer, target, config, &plan);
        let write_done = write_outcome
            .as_ref()
            .map(|w| w.2)
            .unwrap_or_else(|_| Instant::now());
        if let Err(e) = &write_outcome {
            eprintln!("[fanout] the write failed: {e}");
        }

        // Phase 4: wake-ups, then the grace period for the others.
        let parked_targets = control.parked.load(Ordering::Relaxed);
        let wake_deadline = write_done + config.wake_timeout;
        let mut next_report = Instant::now() + Duration::from_secs(1);
        while Instant::now() < wake_deadline
            && control.answered.load(Ordering::Relaxed) < parked_targets.min(config.watchers)
        {
            if config.progress && Instant::now() >= next_report {
                eprintln!(
                    "[fanout] woken {} / {}",
                    group_digits(control.answered.load(Ordering::Relaxed) as u64),
                    group_digits(config.watchers as u64)
                );
                next_report += Duration::from_secs(1);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if config.others > 0 {
            std::thread::sleep(config.others_grace);
        }
        control.stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let park_duration = parked_at.map(|at| at - park_started).unwrap_or_default();
    summarize(
        config,
        per_thread,
        write_outcome,
        rss_before,
        rss_after,
        park_duration,
        source_addrs.len(),
        index,
    )
}

/// Sends the write; returns (status, sent, response received). One retry on a fresh
/// connection if the idle pre-opened one was closed meanwhile.
fn perform_write(
    writer: &mut BlockingClient,
    target: &Target,
    config: &RunConfig,
    plan: &Plan,
) -> Result<(u16, Instant, Instant), String> {
    let content_type = (!plan.write_body.is_empty() && plan.write_body.starts_with('{'))
        .then_some("application/json");
    let attempt = |client: &mut BlockingClient| {
        let sent = Instant::now();
        let response = client.request(
            &plan.write_method,
            &plan.write_path,
            content_type,
            plan.write_body.as_bytes(),
        )?;
        Ok::<_, String>((response.status, sent, Instant::now()))
    };
    let (status, sent, done) = match attempt(writer) {
        Ok(r) => r,
        Err(_) => {
            let mut fresh = BlockingClient::new(target, config.timeout);
            fresh.connect()?;
            attempt(&mut fresh)?
        }
    };
    if !(200..300).contains(&status) {
        return Err(format!(
            "{} {} answered {status}",
            plan.write_method, plan.write_path
        ));
    }
    Ok((status, sent, done))
}

#[allow(clippy::too_many_arguments)]
async fn worker(
    config: &RunConfig,
    target: &Target,
    thread: usize,
    threads: usize,
    control: Arc<Control>,
    other_flags: &[bool],
    source_addrs: &[Ipv4Addr],
    watch_request: &str,
    other_request: &str,
) -> Vec<Outcome> {
    let total = config.watchers + config.others;
    let outcomes: Rc<RefCell<Vec<Outcome>>> = Rc::new(RefCell::new(Vec::new()));
    // Answered watchers keep their connection until the run ends: closing 15,000 sockets
    // while the rest are still being answered would load both ends with teardown work that
    // is not part of the wake-up being measured (a real watcher keeps it for its next query).
    let kept: Rc<RefCell<Vec<HttpConn>>> = Rc::new(RefCell::new(Vec::new()));
    let mut encoded_watch = Vec::new();
    encode_request(
        &mut encoded_watch,
        "GET",
        watch_request,
        &target.authority,
        None,
        b"",
    );
    let mut encoded_other = Vec::new();
    encode_request(
        &mut encoded_other,
        "GET",
        other_request,
        &target.authority,
        None,
        b"",
    );
    for index in (thread..total).step_by(threads) {
        if control.stop.load(Ordering::Relaxed) {
            break;
        }
        let is_other = other_flags[index];
        let source = (!source_addrs.is_empty()).then(|| source_addrs[index % source_addrs.len()]);
        let slot = {
            let mut o = outcomes.borrow_mut();
            o.push(Outcome {
                is_other,
                parked: false,
                answered_at: None,
                status: 0,
                index: None,
                failed: false,
            });
            o.len() - 1
        };
        let stream = match connect_tcp(target.addr, source, config.connect_timeout)
            .and_then(TcpStream::from_std)
        {
            Ok(s) => s,
            Err(e) => {
                if control.failed_to_park.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("[fanout] connect from {source:?} failed: {e}");
                }
                outcomes.borrow_mut()[slot].failed = true;
                continue;
            }
        };
        let request = if is_other {
            encoded_other.clone()
        } else {
            encoded_watch.clone()
        };
        monoio::spawn(watch(
            HttpConn::new(stream, WATCHER_READ_BYTES),
            request,
            slot,
            outcomes.clone(),
            control.clone(),
            kept.clone(),
        ));
        // Let the spawned tasks write their queries while this thread keeps connecting.
        if slot % 64 == 63 {
            monoio::time::sleep(Duration::ZERO).await;
        }
    }
    while !control.stop.load(Ordering::Relaxed) {
        monoio::time::sleep(STOP_POLL).await;
    }
    kept.borrow_mut().clear();
    let result = outcomes.borrow().clone();
    result
}

async fn watch(
    mut conn: HttpConn,
    request: Vec<u8>,
    slot: usize,
    outcomes: Rc<RefCell<Vec<Outcome>>>,
    control: Arc<Control>,
    kept: Rc<RefCell<Vec<HttpConn>>>,
) {
    if conn.send(request).await.is_err() {
        outcomes.borrow_mut()[slot].failed = true;
        control.failed_to_park.fetch_add(1, Ordering::Relaxed);
        return;
    }
    outcomes.borrow_mut()[slot].parked = true;
    control.parked.fetch_add(1, Ordering::Relaxed);
    let mut body = Vec::new();
    let result = conn.read_response(false, &mut body).await;
    let now = Instant::now();
    let mut all = outcomes.borrow_mut();
    let outcome = &mut all[slot];
    match result {
        Ok(response) => {
            outcome.answered_at = Some(now);
            outcome.status = response.status;
            outcome.index = response.consul_index;
            if outcome.is_other {
                control.answered_others.fetch_add(1, Ordering::Relaxed);
            } else {
                control.answered.fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(_) => outcome.failed = true,
    }
    drop(all);
    kept.borrow_mut().push(conn);
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    config: &RunConfig,
    per_thread: Vec<Vec<Outcome>>,
    write: Result<(u16, Instant, Instant), String>,
    rss_before: Option<u64>,
    rss_after: Option<u64>,
    park_duration: Duration,
    source_count: usize,
    initial_index: u64,
) -> Result<RunResult, String> {
    let (write_status, write_sent, write_done) = match &write {
        Ok(w) => (Some(w.0), Some(w.1), Some(w.2)),
        Err(_) => (None, None, None),
    };
    let mut wake = LatencyHistogram::new();
    let mut wake_from_send = LatencyHistogram::new();
    let mut stats = ThreadStats::default();
    let (mut parked, mut early, mut answered, mut before_write_response) = (0u64, 0u64, 0u64, 0u64);
    let (mut unanswered, mut failed, mut lost) = (0u64, 0u64, 0u64);
    let (mut others_parked, mut others_woken, mut bad_status, mut index_not_advanced) =
        (0u64, 0u64, 0u64, 0u64);
    let mut last_wake: Option<Instant> = None;
    for outcome in per_thread.iter().flatten() {
        if outcome.is_other {
            others_parked += u64::from(outcome.parked);
            others_woken += u64::from(outcome.answered_at.is_some());
            continue;
        }
        if !outcome.parked {
            failed += 1;
            continue;
        }
        parked += 1;
        match (outcome.answered_at, write_sent, write_done) {
            (Some(at), Some(sent), Some(done)) if at >= sent => {
                if !(200..300).contains(&outcome.status) && outcome.status != 404 {
                    bad_status += 1;
                    *stats.statuses.entry(outcome.status).or_default() += 1;
                    continue;
                }
                answered += 1;
                if outcome.index.is_none_or(|i| i <= initial_index) {
                    index_not_advanced += 1;
                }
                if at < done {
                    before_write_response += 1;
                }
                wake.record(at.saturating_duration_since(done));
                wake_from_send.record(at - sent);
                last_wake = Some(last_wake.map_or(at, |l| l.max(at)));
            }
            (Some(_), _, _) => early += 1,
            // Parked, then the connection failed before any answer.
            (None, _, _) if outcome.failed => lost += 1,
            (None, _, _) => unanswered += 1,
        }
    }
    stats.requests_ok = answered;
    stats.ops = answered;
    stats.sent = parked;
    stats.latency = wake.clone();
    stats.errors.connect = failed;
    stats.errors.timeout = unanswered;
    stats.errors.io = lost;
    stats.errors.status = bad_status;
    stats.errors.protocol = early;
    if let Err(e) = &write {
        stats.first_error = Some(format!("write: {e}"));
    } else if early > 0 {
        stats.first_error = Some(format!(
            "{early} watchers answered before the write (not parked?)"
        ));
    }
    let wake_window = match (last_wake, write_done) {
        (Some(last), Some(done)) => last.saturating_duration_since(done),
        _ => Duration::ZERO,
    };
    let w = wake.summary();
    let ws = wake_from_send.summary();
    let mut extra = Map::new();
    extra.insert("watchers".into(), json!(config.watchers));
    extra.insert("parked".into(), json!(parked));
    extra.insert("answered".into(), json!(answered));
    extra.insert(
        "all_answered".into(),
        json!(answered == config.watchers as u64),
    );
    extra.insert("unanswered".into(), json!(unanswered));
    extra.insert("early".into(), json!(early));
    extra.insert("connect_failed".into(), json!(failed));
    extra.insert("lost".into(), json!(lost));
    extra.insert("index_not_advanced".into(), json!(index_not_advanced));
    extra.insert("initial_index".into(), json!(initial_index));
    extra.insert(
        "woke_before_write_response".into(),
        json!(before_write_response),
    );
    extra.insert("wake_p50_ms".into(), json!(w.p50_ms));
    extra.insert("wake_p90_ms".into(), json!(w.p90_ms));
    extra.insert("wake_p99_ms".into(), json!(w.p99_ms));
    extra.insert("wake_max_ms".into(), json!(w.max_ms));
    extra.insert("wake_from_write_sent_p50_ms".into(), json!(ws.p50_ms));
    extra.insert("wake_from_write_sent_p99_ms".into(), json!(ws.p99_ms));
    extra.insert(
        "percentiles_from_write_sent".into(),
        json!(wake_from_send
            .curve()
            .iter()
            .map(|(p, ms)| json!([p, ms]))
            .collect::<Vec<_>>()),
    );
    extra.insert(
        "wake_window_ms".into(),
        json!(wake_window.as_secs_f64() * 1e3),
    );
    extra.insert("write_status".into(), json!(write_status));
    extra.insert(
        "write_latency_ms".into(),
        json!(match (write_sent, write_done) {
            (Some(s), Some(d)) => Some((d - s).as_secs_f64() * 1e3),
            _ => None,
        }),
    );
    extra.insert("others".into(), json!(config.others));
    extra.insert("others_parked".into(), json!(others_parked));
    extra.insert("others_woken".into(), json!(others_woken));
    extra.insert("park_duration_s".into(), json!(park_duration.as_secs_f64()));
    extra.insert("source_addresses".into(), json!(source_count.max(1)));
    crate::report::insert_rss(
        &mut extra,
        rss_before,
        rss_after,
        (parked + others_parked) as usize,
        "rss_per_watcher_bytes",
    );
    let mut result_config = config.clone();
    result_config.connections = config.watchers + config.others;
    // Throughput here is wake-ups per second over the wake window.
    let measured = if wake_window.is_zero() {
        Duration::from_secs(1)
    } else {
        wake_window
    };
    Ok(RunResult {
        config: result_config,
        stats,
        measured,
        extra,
        multi_step: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Scenario;

    #[test]
    fn blocking_paths() {
        assert_eq!(
            blocking_path("/v1/kv/a", 7, Duration::from_secs(60)),
            "/v1/kv/a?index=7&wait=60000ms"
        );
        assert_eq!(
            blocking_path("/v1/kv/a?recurse", 7, Duration::from_secs(1)),
            "/v1/kv/a?recurse&index=7&wait=1000ms"
        );
    }

    #[test]
    fn plans_per_watch_kind() {
        let mut c = RunConfig::new(Scenario::BlockingFanout);
        c.key = "k".into();
        let p = plan(&c);
        assert_eq!(
            (p.watch_path.as_str(), p.write_path.as_str()),
            ("/v1/kv/k", "/v1/kv/k")
        );
        c.watch = WatchKind::Prefix;
        c.key = "dir/".into();
        let p = plan(&c);
        assert_eq!(p.watch_path, "/v1/kv/dir/?recurse");
        assert_eq!(p.write_path, "/v1/kv/dir/fanout-write");
        c.watch = WatchKind::Health;
        c.check_id = Some("service:web-0".into());
        let p = plan(&c);
        assert_eq!(p.watch_path, "/v1/health/service/web");
        assert_eq!(p.other_path, "/v1/health/service/api");
        assert_eq!(p.write_path, "/v1/agent/check/fail/service:web-0");
        c.check_id = None;
        c.write_method = Some("POST".into());
        let p = plan(&c);
        assert_eq!(
            (p.write_method.as_str(), p.write_path.as_str()),
            ("POST", "/v1/catalog/register")
        );
    }

    #[test]
    fn others_are_exactly_counted_and_spread() {
        for (total, others) in [(20_000, 5_000), (10, 3), (7, 7), (5, 0), (1, 1)] {
            let flags = other_flags(total, others);
            assert_eq!(flags.len(), total);
            assert_eq!(
                flags.iter().filter(|&&f| f).count(),
                others,
                "{total}/{others}"
            );
        }
        // With two threads (even/odd indices) each gets about half of them.
        let flags = other_flags(20_000, 5_000);
        let even = (0..20_000).filter(|&i| i % 2 == 0 && flags[i]).count();
        assert!((2300..=2700).contains(&even), "{even}");
    }

    #[test]
    fn automatic_source_spreading() {
        let mut c = RunConfig::new(Scenario::BlockingFanout);
        let loopback = crate::net::parse_target("http://127.0.0.1:1").unwrap();
        assert!(sources(&c, &loopback, 15_000).is_empty());
        let s = sources(&c, &loopback, 20_000);
        assert_eq!(
            s,
            vec![Ipv4Addr::new(127, 0, 0, 40), Ipv4Addr::new(127, 0, 0, 41)]
        );
        c.source_addrs = vec![Ipv4Addr::new(127, 0, 0, 50)];
        assert_eq!(sources(&c, &loopback, 20_000), c.source_addrs);
    }
}
