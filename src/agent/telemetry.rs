//! The agent's telemetry duties, on shard 0: sampling every thread's recorders once a
//! second into the windows the sinks compare against, the gauges (read from the store
//! version, the cluster status, gossip and the process), the statsd and dogstatsd sinks
//! over UDP, `/v1/agent/metrics` in go-metrics' JSON or the Prometheus text format, and
//! `/v1/agent/metrics/stream`'s summaries.
//!
//! Nothing here is on a request path: recording is `crate::telemetry`'s, and what this
//! module does per second is a merge of the recorders and, with a sink configured, a few
//! datagrams. The naming and rendering rules are `consul::metrics`' (pure).

use super::Agent;
use crate::api::agent_channel::AgentReply;
use crate::config::telemetry::TelemetryConfig;
use crate::config::AgentConfig;
use crate::consul::metrics::{
    self, Counter, Gauge, GaugeValue, LineFormat, Naming, PrefixFilter, Snapshot, Windows,
};
use crate::store::catalog::read::service_usage;
use std::cell::RefCell;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest statsd datagram, as go-metrics' statsd sink keeps them (under a typical MTU).
const STATSD_DATAGRAM_BYTES_MAX: usize = 1400;
/// Most `/v1/agent/metrics/stream` subscribers at once; each costs a rendering per interval.
const METRICS_STREAMS_MAX: usize = 64;
/// How often an unresolved sink address is looked up again.
const SINK_RESOLVE_RETRY: Duration = Duration::from_secs(10);

/// The Prometheus answer's content type (text format 0.0.4).
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The names every sink prints, from the `telemetry` stanza.
pub fn naming(config: &AgentConfig) -> Naming {
    let telemetry = &config.telemetry;
    Naming {
        prefix: telemetry.metrics_prefix.clone(),
        hostname: (!telemetry.disable_hostname).then(crate::config::hostname),
        node_name: config.node_name.clone(),
        filter: PrefixFilter {
            allowed: telemetry.allowed_prefixes.clone(),
            blocked: telemetry.blocked_prefixes.clone(),
            default_allow: telemetry.filter_default,
        },
    }
}

/// Applies the prefix filter to the recorders and checks the sink addresses, before any
/// thread records: an address that does not resolve stops the agent unless
/// `retry_failed_connection` (Consul's default) lets it keep trying.
pub fn configure(config: &AgentConfig) -> Result<(), String> {
    crate::telemetry::configure_filter(&naming(config));
    for (key, address) in sink_addresses(&config.telemetry) {
        if let Err(e) = resolve(&address) {
            if !config.telemetry.retry_failed_connection {
                return Err(format!("telemetry.{key}: {e}"));
            }
            log::warn!("telemetry: {key} {address}: {e}; retrying every {SINK_RESOLVE_RETRY:?}");
        }
    }
    Ok(())
}

fn sink_addresses(config: &TelemetryConfig) -> Vec<(&'static str, String)> {
    let mut sinks = Vec::new();
    if let Some(address) = &config.statsd_address {
        sinks.push(("statsd_address", address.clone()));
    }
    if let Some(address) = &config.dogstatsd_addr {
        sinks.push(("dogstatsd_addr", address.clone()));
    }
    sinks
}

fn resolve(address: &str) -> Result<SocketAddr, String> {
    address
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {address:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{address:?} resolves to no address"))
}

/// A statsd or dogstatsd server, fed over a non-blocking UDP socket.
struct UdpSink {
    address: String,
    format: LineFormat,
    target: Option<SocketAddr>,
    /// A lookup of `address` running on a helper thread (lookups block).
    resolving: Option<flume::Receiver<Option<SocketAddr>>>,
    next_resolve_ms: u64,
    socket: Option<UdpSocket>,
}

impl UdpSink {
    fn new(address: String, format: LineFormat) -> UdpSink {
        let socket = UdpSocket::bind(("0.0.0.0", 0))
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|e| log::warn!("telemetry: cannot open a UDP socket for {address}: {e}"))
            .ok();
        UdpSink {
            address,
            format,
            target: None,
            resolving: None,
            next_resolve_ms: 0,
            socket,
        }
    }

    /// The resolved target, starting or collecting a lookup when there is none.
    fn target(&mut self, now_ms: u64) -> Option<SocketAddr> {
        if self.target.is_some() {
            return self.target;
        }
        if let Some(lookup) = &self.resolving {
            match lookup.try_recv() {
                Ok(found) => {
                    self.resolving = None;
                    self.target = found;
                }
                Err(flume::TryRecvError::Empty) => return None,
                Err(flume::TryRecvError::Disconnected) => self.resolving = None,
            }
        }
        if self.target.is_none() && self.resolving.is_none() && now_ms >= self.next_resolve_ms {
            self.next_resolve_ms = now_ms + SINK_RESOLVE_RETRY.as_millis() as u64;
            let (tx, rx) = flume::bounded(1);
            let address = self.address.clone();
            let spawned = std::thread::Builder::new()
                .name("praetor-resolve".into())
                .spawn(move || {
                    let _ = tx.send(resolve(&address).ok());
                });
            if spawned.is_ok() {
                self.resolving = Some(rx);
            }
        }
        self.target
    }

    fn send(&mut self, now_ms: u64, lines: &[String]) {
        let Some(target) = self.target(now_ms) else {
            return;
        };
        let Some(socket) = &self.socket else {
            return;
        };
        for datagram in metrics::pack_datagrams(lines, STATSD_DATAGRAM_BYTES_MAX) {
            // UDP is best effort: a full send buffer loses the datagram, which is counted.
            if socket.send_to(&datagram, target).is_err() {
                crate::telemetry::incr(Counter::TelemetryDatagramsDropped);
            }
        }
    }
}

/// The telemetry state shard 0 keeps.
pub struct Telemetry {
    naming: Naming,
    prometheus_retention: Duration,
    windows: RefCell<Windows>,
    sinks: RefCell<Vec<UdpSink>>,
    /// What the sinks were sent up to.
    flushed: RefCell<Snapshot>,
    /// `/v1/agent/metrics/stream` subscribers, each sent the summary of every interval.
    streams: RefCell<Vec<flume::Sender<Vec<u8>>>>,
}

impl Telemetry {
    pub fn new(config: &AgentConfig) -> Telemetry {
        let telemetry = &config.telemetry;
        let mut sinks = Vec::new();
        if let Some(address) = &telemetry.statsd_address {
            sinks.push(UdpSink::new(address.clone(), LineFormat::Statsd));
        }
        if let Some(address) = &telemetry.dogstatsd_addr {
            sinks.push(UdpSink::new(
                address.clone(),
                LineFormat::Dogstatsd {
                    tags: telemetry.dogstatsd_tags.clone(),
                },
            ));
        }
        let first = crate::telemetry::snapshot();
        let mut windows = Windows::default();
        windows.record(unix_ms(), first.clone());
        Telemetry {
            naming: naming(config),
            prometheus_retention: telemetry.prometheus_retention,
            windows: RefCell::new(windows),
            sinks: RefCell::new(sinks),
            flushed: RefCell::new(first),
            streams: RefCell::new(Vec::new()),
        }
    }

    /// Adds a `/v1/agent/metrics/stream` subscriber; it gets one JSON summary per interval
    /// until it stops taking them.
    pub fn subscribe(&self, chunks: flume::Sender<Vec<u8>>) {
        let mut streams = self.streams.borrow_mut();
        streams.retain(|s| !s.is_disconnected());
        if streams.len() >= METRICS_STREAMS_MAX {
            log::warn!("telemetry: {METRICS_STREAMS_MAX} metrics streams open; refusing another");
            return;
        }
        streams.push(chunks);
    }
}

/// Samples the recorders every second, feeds the sinks and the stream subscribers.
pub async fn run(agent: Rc<Agent>) {
    let period = Duration::from_millis(metrics::SAMPLE_INTERVAL_MS);
    loop {
        monoio::time::sleep(period).await;
        if agent.shard.shutting_down() {
            return;
        }
        sample(&agent);
    }
}

fn sample(agent: &Agent) {
    let telemetry = &agent.telemetry;
    let now_ms = unix_ms();
    let snapshot = crate::telemetry::snapshot();
    let finished = telemetry
        .windows
        .borrow_mut()
        .record(now_ms, snapshot.clone());
    let interval_ended = finished.is_some();
    let gauges = (interval_ended
        && (!telemetry.streams.borrow().is_empty() || !telemetry.sinks.borrow().is_empty()))
    .then(|| gauges(agent));
    if let (Some((start, interval)), Some(gauges)) = (&finished, &gauges) {
        let summary = metrics::summary_json(*start, interval, gauges, &telemetry.naming);
        // Consul's stream encodes each summary indented by four spaces, one per line.
        let mut body = Vec::with_capacity(4096);
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut body, formatter);
        let _ = serde::Serialize::serialize(&summary, &mut serializer);
        body.push(b'\n');
        telemetry
            .streams
            .borrow_mut()
            .retain(|subscriber| subscriber.try_send(body.clone()).is_ok());
    }
    if telemetry.sinks.borrow().is_empty() {
        return;
    }
    let since = snapshot.since(&telemetry.flushed.borrow());
    *telemetry.flushed.borrow_mut() = snapshot;
    // Gauges go out once per interval, as Consul's runtime and usage gauges are set.
    let gauges = gauges.unwrap_or_default();
    for sink in telemetry.sinks.borrow_mut().iter_mut() {
        let lines = metrics::statsd_lines(&since, &gauges, &telemetry.naming, &sink.format);
        if !lines.is_empty() {
            sink.send(now_ms, &lines);
        }
    }
}

/// Consul's reason for not serving Prometheus text without a retention time.
const PROMETHEUS_DISABLED: &str =
    "Prometheus is not enabled since its retention time is not positive";

/// `GET /v1/agent/metrics`: go-metrics' summary of the last finished interval, or the
/// Prometheus text when asked for and `prometheus_retention_time` is set.
pub fn metrics_reply(agent: &Agent, prometheus: bool, pretty: bool) -> AgentReply {
    let telemetry = &agent.telemetry;
    let now_ms = unix_ms();
    let total = crate::telemetry::snapshot();
    let gauges = gauges(agent);
    if prometheus {
        if telemetry.prometheus_retention.is_zero() {
            // Consul means a 415 here, but its handler returns before writing the status,
            // so what its clients see is a 200 with an empty body and the reason in a
            // header; that is what they are written against.
            return AgentReply {
                status: 200,
                content_type: None,
                headers: format!("X-Consul-Reason: {PROMETHEUS_DISABLED}\r\n").into_bytes(),
                body: Vec::new(),
            };
        }
        let body = metrics::render_prometheus(
            now_ms,
            &total,
            &telemetry.windows.borrow(),
            &gauges,
            &telemetry.naming,
            telemetry.prometheus_retention.as_millis() as u64,
        );
        return AgentReply {
            status: 200,
            content_type: Some(PROMETHEUS_CONTENT_TYPE),
            headers: Vec::new(),
            body,
        };
    }
    let (start, interval) = telemetry.windows.borrow().display_interval(&total);
    let summary = metrics::summary_json(start, &interval, &gauges, &telemetry.naming);
    let mut body = Vec::new();
    crate::consul::json::write_serde(&mut body, &summary, pretty);
    AgentReply::json(200, body)
}

/// Every gauge's value now.
pub fn gauges(agent: &Agent) -> Vec<GaugeValue> {
    let shard = &agent.shard;
    let version = shard.current_version();
    let status = shard.cluster_status();
    let (local_services, local_checks) = {
        let state = agent.state.borrow();
        (state.services.len(), state.checks.len())
    };
    let process = ProcessStats::read();
    let mut gauges = vec![
        GaugeValue::new(Gauge::RuntimeAllocBytes, process.resident_bytes as f64),
        GaugeValue::new(Gauge::RuntimeSysBytes, process.virtual_bytes as f64),
        GaugeValue::new(Gauge::RuntimeNumGoroutines, process.threads as f64),
        GaugeValue::new(Gauge::RuntimeTotalGcPauseNs, 0.0),
        GaugeValue::new(Gauge::RuntimeTotalGcRuns, 0.0),
        GaugeValue::new(Gauge::RuntimeShards, shard.shard_count() as f64),
        GaugeValue::new(
            Gauge::RuntimeUptimeSeconds,
            shard.shared().started_at.elapsed().as_secs_f64(),
        ),
        GaugeValue::new(Gauge::AgentLocalServices, local_services as f64),
        GaugeValue::new(Gauge::AgentLocalChecks, local_checks as f64),
        GaugeValue::new(Gauge::HttpParkedQueries, shard.parked_queries() as f64),
    ];
    if let Some(lan) = agent.pools.lan.as_ref() {
        let members = lan.members();
        let alive = members.iter().filter(|m| m.status.as_str() == "alive");
        let servers = alive
            .clone()
            .filter(|m| m.tags.get("role").is_some_and(|r| r == "consul"))
            .count();
        let clients = alive
            .filter(|m| m.tags.get("role").is_some_and(|r| r == "node"))
            .count();
        gauges.push(GaugeValue::new(Gauge::MembersServers, servers as f64));
        gauges.push(GaugeValue::new(Gauge::MembersClients, clients as f64));
    }
    if shard.is_client() {
        return gauges;
    }
    let usage = service_usage(&version);
    let ttl_sessions = version
        .sessions
        .sessions
        .values()
        .filter(|s| !s.ttl.is_empty())
        .count();
    let leader_only = |value: f64| if status.is_leader { value } else { f64::NAN };
    let autopilot = status.autopilot.as_deref();
    gauges.extend([
        GaugeValue::new(Gauge::RaftAppliedIndex, version.index as f64),
        GaugeValue::new(Gauge::RaftLastIndex, status.last_index as f64),
        GaugeValue::new(Gauge::RaftCommitIndex, status.commit_index as f64),
        GaugeValue::new(
            Gauge::ServerIsLeader,
            if status.is_leader { 1.0 } else { 0.0 },
        ),
        GaugeValue::new(
            Gauge::AutopilotHealthy,
            leader_only(autopilot.map_or(f64::NAN, |a| f64::from(u8::from(a.healthy)))),
        ),
        GaugeValue::new(
            Gauge::AutopilotFailureTolerance,
            leader_only(autopilot.map_or(f64::NAN, |a| a.failure_tolerance as f64)),
        ),
        GaugeValue::new(Gauge::SessionTtlActive, ttl_sessions as f64),
        GaugeValue::new(Gauge::StateNodes, usage.nodes as f64),
        GaugeValue::new(Gauge::StateServices, usage.services as f64),
        GaugeValue::new(Gauge::StateServiceInstances, usage.service_instances as f64),
        GaugeValue::new(
            Gauge::StateBillableServiceInstances,
            usage.billable_service_instances as f64,
        ),
        GaugeValue::new(Gauge::StateKvEntries, version.kv.entries.len() as f64),
        GaugeValue::new(Gauge::StateSessions, version.sessions.sessions.len() as f64),
    ]);
    for (kind, count) in usage.connect_instances {
        gauges.push(GaugeValue {
            gauge: Gauge::StateConnectInstances,
            labels: vec![("kind", kind.to_string())],
            value: count as f64,
        });
    }
    gauges
}

/// What `/proc` says about this process.
#[derive(Default)]
struct ProcessStats {
    resident_bytes: u64,
    virtual_bytes: u64,
    threads: u64,
}

impl ProcessStats {
    fn read() -> ProcessStats {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
        let mut stats = ProcessStats::default();
        if let Ok(text) = std::fs::read_to_string("/proc/self/statm") {
            let mut fields = text
                .split_whitespace()
                .map(|f| f.parse::<u64>().unwrap_or(0));
            stats.virtual_bytes = fields.next().unwrap_or(0) * page;
            stats.resident_bytes = fields.next().unwrap_or(0) * page;
        }
        if let Ok(text) = std::fs::read_to_string("/proc/self/status") {
            stats.threads = text
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_stats_read_this_process() {
        let stats = ProcessStats::read();
        assert!(stats.resident_bytes > 0);
        assert!(stats.virtual_bytes >= stats.resident_bytes);
        assert!(stats.threads >= 1);
    }
}
