//! What each command runs with: the configuration the argument parser (`cli.rs`) builds and
//! the scenarios, the compare and chart commands and the fan-out floor read, with the limits
//! every value is checked against.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::dnswire::QueryType;

/// Most connections (or UDP sockets) one run opens; the fd limit usually binds first and is
/// checked at start with a clear message.
pub const CONNECTIONS_MAX: usize = 1_000_000;
/// Most worker threads.
pub const THREADS_MAX: usize = 1024;
/// Largest KV value a run writes.
pub const VALUE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most distinct keys a KV run spreads over.
pub const KEYS_MAX: usize = 10_000_000;
/// Most service instances a run registers.
pub const INSTANCES_MAX: usize = 1_000_000;
/// Longest run (measurement + warm-up).
pub const RUN_DURATION_MAX: Duration = Duration::from_secs(24 * 3600);
/// Most interleaved runs per side in `compare`.
pub const COMPARE_RUNS_MAX: usize = 1000;
/// Most source addresses in a `--source-addrs` range.
pub const SOURCE_ADDRS_MAX: usize = 65_536;
/// Most ACL tokens a run spreads over its connections.
pub const TOKENS_MAX: usize = 1_000_000;
/// Most operations in one `txn` request: Consul's (and praetor's) limit per transaction.
pub const TXN_OPS_MAX: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    KvGet,
    KvPut,
    KvMixed,
    BlockingFanout,
    CatalogChurn,
    HealthQuery,
    Dns,
    SessionLocks,
    /// `PUT /v1/txn` with `--txn-ops` KV sets.
    Txn,
    /// Setup step: register `--instances` instances of `--service`, then exit.
    Register,
    /// Raw TCP: `--value-bytes` messages echoed on each connection; `bytes_per_s`.
    TcpStream,
    /// Raw TCP: a new connection per operation (connect, 64-byte echo, close).
    TcpConnect,
    /// `POST /v1/agent/connect/authorize` of `--key` (a SPIFFE URI) to `--service`.
    ConnectAuthorize,
}

impl Scenario {
    pub const ALL: [Scenario; 13] = [
        Scenario::KvGet,
        Scenario::KvPut,
        Scenario::KvMixed,
        Scenario::BlockingFanout,
        Scenario::CatalogChurn,
        Scenario::HealthQuery,
        Scenario::Dns,
        Scenario::SessionLocks,
        Scenario::Txn,
        Scenario::Register,
        Scenario::TcpStream,
        Scenario::TcpConnect,
        Scenario::ConnectAuthorize,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::KvGet => "kv-get",
            Scenario::KvPut => "kv-put",
            Scenario::KvMixed => "kv-mixed",
            Scenario::BlockingFanout => "blocking-fanout",
            Scenario::CatalogChurn => "catalog-churn",
            Scenario::HealthQuery => "health-query",
            Scenario::Dns => "dns",
            Scenario::SessionLocks => "session-locks",
            Scenario::Txn => "txn",
            Scenario::Register => "register",
            Scenario::TcpStream => "tcp-stream",
            Scenario::TcpConnect => "tcp-connect",
            Scenario::ConnectAuthorize => "connect-authorize",
        }
    }

    pub fn parse(text: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == text)
    }

    pub fn summary(self) -> &'static str {
        match self {
            Scenario::KvGet => "GET /v1/kv/<key> (etcd: POST /v3/kv/range)",
            Scenario::KvPut => "PUT /v1/kv/<key> with --value-bytes (etcd: POST /v3/kv/put)",
            Scenario::KvMixed => "GETs and PUTs in --read-ratio",
            Scenario::BlockingFanout => {
                "park --watchers blocking queries, do one write, measure wake-up latency"
            }
            Scenario::CatalogChurn => "register + deregister service instances",
            Scenario::HealthQuery => "GET /v1/health/service/<svc>[?passing]",
            Scenario::Dns => "UDP (or --tcp) DNS queries",
            Scenario::SessionLocks => "session create + KV acquire + release + destroy cycles",
            Scenario::Txn => "PUT /v1/txn with --txn-ops KV sets, one transaction per request",
            Scenario::Register => "setup: register --instances instances of --service and exit",
            Scenario::TcpStream => {
                "TCP echo of --value-bytes messages per connection (bytes_per_s)"
            }
            Scenario::TcpConnect => {
                "a new TCP connection per operation: connect, echo 64 bytes, close"
            }
            Scenario::ConnectAuthorize => {
                "POST /v1/agent/connect/authorize: --key (a SPIFFE URI) connecting to --service"
            }
        }
    }

    /// The scenarios that have an etcd v3 JSON-gateway mode.
    pub fn has_etcd_mode(self) -> bool {
        matches!(self, Scenario::KvGet | Scenario::KvPut | Scenario::KvMixed)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    Default,
    Stale,
    Consistent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchKind {
    /// `/v1/kv/<key>?index=`
    Key,
    /// `/v1/kv/<key>?recurse&index=`
    Prefix,
    /// `/v1/health/service/<service>?index=`
    Health,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterVia {
    /// `/v1/agent/service/register` and `/v1/agent/service/deregister/<id>`.
    Agent,
    /// `/v1/catalog/register` and `/v1/catalog/deregister`.
    Catalog,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoDriver {
    /// io_uring when the kernel allows it, else epoll (monoio's FusionDriver).
    Auto,
    Uring,
    Epoll,
}

/// The Linux scheduling policy loadgen's threads run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedPolicy {
    /// The default (`SCHED_OTHER`).
    Normal,
    /// `SCHED_BATCH`: a waking loadgen thread does not preempt the running one. On a machine
    /// where the client shares cores with the server under test, thousands of answers
    /// arriving at once otherwise wake the client thousands of times, and each wake-up
    /// preempts the server mid-fan-out: the client's co-location, not the server, sets the
    /// latency.
    Batch,
}

/// Everything one run needs. Flags a scenario does not use are ignored by it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    pub scenario: Scenario,
    pub target: Option<String>,
    pub etcd: bool,
    pub connections: usize,
    pub duration: Duration,
    pub warmup: Duration,
    /// Open-loop offered load in requests per second (all connections together).
    pub rate: Option<f64>,
    /// Worker threads; 0 means one per available core.
    pub threads: usize,
    pub pin_threads: bool,
    pub io_driver: IoDriver,
    pub sched_policy: SchedPolicy,
    pub json: bool,
    pub json_out: Option<String>,
    pub progress: bool,
    pub label: Option<String>,
    /// Bound on one request (or DNS query) from send to complete answer.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    // KV
    pub key: String,
    /// ACL tokens the KV scenarios send: connection `i` uses `tokens[i % len]`; none when
    /// empty.
    pub tokens: Vec<String>,
    /// `--tokens-rotate`: each request takes its connection's next token instead
    /// (connection `i` of `C` sends `tokens[i]`, `tokens[i + C]`, …), so every token is used.
    pub tokens_rotate: bool,
    pub keys: usize,
    pub value_bytes: usize,
    pub read_ratio: f64,
    pub consistency: Consistency,
    pub preload: bool,
    /// `?dc=`: KV requests name this datacenter (answered there, through the target).
    pub datacenter: Option<String>,
    // Blocking fan-out
    pub watchers: usize,
    pub watch: WatchKind,
    pub others: usize,
    pub other_key: String,
    pub other_service: String,
    pub settle: Duration,
    pub wake_timeout: Duration,
    pub others_grace: Duration,
    pub wait: Duration,
    pub write_method: Option<String>,
    pub write_path: Option<String>,
    pub write_body: Option<String>,
    pub check_id: Option<String>,
    pub rss_pid: Option<u32>,
    pub source_addrs: Vec<Ipv4Addr>,
    // Catalog and health
    pub service: String,
    pub instances: usize,
    pub via: RegisterVia,
    /// Catalog registrations: instances per node.
    pub per_node: usize,
    /// `?passing` on health queries; `None` = the scenario's default.
    pub passing: Option<bool>,
    /// `pretty` on health queries (indented JSON).
    pub pretty: bool,
    // DNS
    pub qname: Option<String>,
    pub qtype: QueryType,
    pub tcp: bool,
    pub edns: Option<u16>,
    pub allow_empty: bool,
    // Sessions
    pub lock_key: String,
    // Transactions
    pub txn_ops: usize,
}

impl RunConfig {
    /// The token connection `conn_index` sends, if any.
    pub fn token_for(&self, conn_index: usize) -> Option<&str> {
        (!self.tokens.is_empty()).then(|| self.tokens[conn_index % self.tokens.len()].as_str())
    }

    pub fn new(scenario: Scenario) -> Self {
        RunConfig {
            scenario,
            target: None,
            etcd: false,
            connections: 64,
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            rate: None,
            threads: 0,
            pin_threads: false,
            io_driver: IoDriver::Auto,
            sched_policy: SchedPolicy::Normal,
            json: false,
            json_out: None,
            progress: true,
            label: None,
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            key: "loadgen/key".into(),
            tokens: Vec::new(),
            tokens_rotate: false,
            keys: 1,
            value_bytes: 64,
            read_ratio: 0.9,
            consistency: Consistency::Default,
            preload: true,
            datacenter: None,
            watchers: 1000,
            watch: WatchKind::Key,
            others: 0,
            other_key: "loadgen/other".into(),
            other_service: "api".into(),
            settle: Duration::from_secs(2),
            wake_timeout: Duration::from_secs(10),
            others_grace: Duration::from_secs(1),
            wait: Duration::from_secs(300),
            write_method: None,
            write_path: None,
            write_body: None,
            check_id: None,
            rss_pid: None,
            source_addrs: Vec::new(),
            service: "web".into(),
            instances: 0,
            via: RegisterVia::Catalog,
            per_node: 1,
            passing: None,
            pretty: false,
            qname: None,
            qtype: QueryType::A,
            tcp: false,
            edns: None,
            allow_empty: false,
            lock_key: "loadgen/lock".into(),
            txn_ops: TXN_OPS_MAX,
        }
    }

    /// Worker threads after resolving 0 to the number of available cores.
    pub fn effective_threads(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }
    }

    /// Whether health queries carry `?passing`.
    pub fn effective_passing(&self) -> bool {
        self.passing
            .unwrap_or(self.scenario == Scenario::HealthQuery)
    }

    pub fn effective_qname(&self) -> String {
        match &self.qname {
            Some(name) => name.clone(),
            None => format!("{}.service.consul", self.service),
        }
    }

    /// Checks the combinations a single flag cannot check alone.
    pub fn validate(&self) -> Result<(), String> {
        if self.target.is_none() {
            return Err("--target is required".into());
        }
        if self.etcd && !self.scenario.has_etcd_mode() {
            return Err(format!(
                "{} has no --etcd mode (only kv-get, kv-put, kv-mixed)",
                self.scenario.name()
            ));
        }
        if self.duration.is_zero() {
            return Err("--duration must be positive".into());
        }
        if self.duration + self.warmup > RUN_DURATION_MAX {
            return Err(format!(
                "--duration + --warmup exceed {}s",
                RUN_DURATION_MAX.as_secs()
            ));
        }
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err("--timeout and --connect-timeout must be positive".into());
        }
        if self.scenario == Scenario::BlockingFanout {
            if self.watchers == 0 {
                return Err("--watchers must be at least 1".into());
            }
            if self.rate.is_some() {
                return Err("blocking-fanout has no open-loop mode (--rate)".into());
            }
            if self.watch != WatchKind::Health && self.check_id.is_some() {
                return Err("--check-id needs --watch health".into());
            }
        }
        if self.scenario == Scenario::Register && self.instances == 0 {
            return Err("register needs --instances N (N >= 1)".into());
        }
        if self.rate.is_some()
            && matches!(self.scenario, Scenario::SessionLocks | Scenario::Register)
        {
            return Err(format!(
                "{} has no open-loop mode (--rate)",
                self.scenario.name()
            ));
        }
        Ok(())
    }
}

/// `loadgen compare`: two sides run interleaved A B A B …
#[derive(Clone, Debug, PartialEq)]
pub struct CompareConfig {
    pub a: RunConfig,
    pub b: RunConfig,
    pub name_a: String,
    pub name_b: String,
    pub runs: usize,
    /// Idle time between two runs, so one run's tail does not overlap the next.
    pub pause: Duration,
    /// The JSON field compared (default `throughput_rps`).
    pub metric: String,
    pub json: bool,
    pub json_out: Option<String>,
}

/// `loadgen chart --input FILE --output FILE.png [--title T]`
#[derive(Clone, Debug, PartialEq)]
pub struct ChartConfig {
    pub input: String,
    pub output: String,
    pub title: Option<String>,
}

/// `loadgen fanout-floor`'s settings.
#[derive(Clone, Debug, PartialEq)]
pub struct FloorConfig {
    pub listen: SocketAddr,
    pub threads: usize,
    pub duration: Duration,
    /// A whole HTTP response (head and body) answered to every GET without `index=`, in
    /// place of the small 404: the byte floor of a large read such as a health answer.
    pub answer_file: Option<String>,
    /// Answered instead of `answer_file` when the request line carries `pretty`.
    pub pretty_answer_file: Option<String>,
}
