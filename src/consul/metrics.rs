//! Consul's telemetry, the pure half: the catalogue of every metric praetor emits (names,
//! kinds, help texts), the prefix filter and naming rules, the snapshots a scrape merges and
//! their differences, the windows the sinks compare against, and the renderings Consul's
//! sinks produce — go-metrics' `DisplayMetrics` JSON (`/v1/agent/metrics`), the Prometheus
//! text format (`?format=prometheus`), and statsd and dogstatsd lines.
//!
//! The process-wide half — the per-thread recorders, the registry that hands them out, the
//! filter flags the hot paths read and the `api.http` series table — is the runtime's
//! (`crate::telemetry`): it keeps state for the whole process, which a pure layer may not.
//! It fills a [`Snapshot`] with everything a rendering needs (the counts, which metrics the
//! filter lets through, the `api.http` series names), so the renderings here read only
//! their arguments.
//!
//! Timers and samples are log-linear histograms ([`BUCKETS`] buckets, eight per power of
//! two: a value is known to within 6.25%, and a quantile is interpolated inside its bucket).
//! Values are stored in thousandths of the unit they display in (microseconds for timers,
//! which display milliseconds as go-metrics does), so integer sums stay exact.
//!
//! Invariants: the module keeps no state, reads no clock and does no I/O: every time it
//! prints or compares is an argument. A snapshot's counts never decrease between two
//! snapshots (recorders are never freed, a released one keeps its counts), so a difference
//! is never negative.

use std::fmt::Write as _;

// ---------------------------------------------------------------------------------------
// The catalogue.

/// One metric's identity as the sinks print it: its name without the `metrics_prefix`
/// (`raft.commitTime` becomes `consul.raft.commitTime`) and its help text for Prometheus.
#[derive(Clone, Copy, Debug)]
pub struct Def {
    pub name: &'static str,
    pub help: &'static str,
    /// Consul labels this metric with the agent's node name (`node="…"`).
    pub node_label: bool,
}

const fn def(name: &'static str, help: &'static str) -> Def {
    Def {
        name,
        help,
        node_label: false,
    }
}

const fn def_node(name: &'static str, help: &'static str) -> Def {
    Def {
        name,
        help,
        node_label: true,
    }
}

macro_rules! catalogue {
    ($(#[$meta:meta])* $kind:ident { $($variant:ident => $def:expr,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum $kind { $($variant,)* }

        impl $kind {
            /// Every variant, in declaration order (its index is its slot).
            pub const ALL: &'static [$kind] = &[$($kind::$variant,)*];
            pub const COUNT: usize = $kind::ALL.len();
            const DEFS: &'static [Def] = &[$($def,)*];
            pub fn def(self) -> &'static Def {
                &Self::DEFS[self as usize]
            }
        }
    };
}

catalogue! {
    /// Counters: monotonically increasing totals (Prometheus `counter`, statsd `|c`).
    Counter {
        RaftApply => def("raft.apply", "Raft transactions the leader accepted."),
        RaftStateLeader => def("raft.state.leader", "Times this server became the Raft leader."),
        RaftStateCandidate => def("raft.state.candidate", "Elections this server started."),
        RaftStateFollower => def("raft.state.follower", "Times this server became a Raft follower."),
        RaftTransitionHeartbeatTimeout => def("raft.transition.heartbeat_timeout", "Times a follower stopped hearing its leader and started an election."),
        RpcRequest => def("rpc.request", "Requests this server answered for another agent over the server RPC port."),
        RpcRequestError => def("rpc.request_error", "Server RPC requests that failed."),
        RpcQuery => def("rpc.query", "Read queries this server evaluated."),
        ClientRpc => def("client.rpc", "RPCs this client agent sent to a server."),
        ClientRpcFailed => def("client.rpc.failed", "RPCs this client agent sent that failed."),
        ClientRpcExceeded => def("client.rpc.exceeded", "RPCs refused by this agent's rate limit (praetor has none: always 0)."),
        DnsStaleQueries => def_node("dns.stale_queries", "DNS queries answered from a server more than 5 s behind its leader."),
        MemberlistUdpSent => def("memberlist.udp.sent", "Bytes of gossip sent over UDP."),
        MemberlistUdpReceived => def("memberlist.udp.received", "Bytes of gossip received over UDP."),
        MemberlistTcpConnect => def("memberlist.tcp.connect", "Gossip TCP connections opened (push/pull, large messages)."),
        MemberlistTcpAccept => def("memberlist.tcp.accept", "Gossip TCP connections accepted."),
        MemberlistTcpSent => def("memberlist.tcp.sent", "Bytes of gossip sent over TCP."),
        SerfMemberJoin => def("serf.member.join", "Members that joined a gossip pool."),
        SerfMemberLeft => def("serf.member.left", "Members that left a gossip pool."),
        SerfMemberFailed => def("serf.member.failed", "Members a gossip pool declared failed."),
        SerfMemberUpdate => def("serf.member.update", "Member updates (tags, address) heard in a gossip pool."),
        SerfEvents => def("serf.events", "User events received."),
        SerfQueries => def("serf.queries", "Serf queries received."),
        AclTokenCacheHit => def("acl.token.cache_hit", "Token resolutions answered from the authorizer cache."),
        AclTokenCacheMiss => def("acl.token.cache_miss", "Token resolutions that compiled an authorizer."),
        CatalogRegisterRequests => def_node("client.api.catalog_register", "Catalog registrations received over HTTP."),
        CatalogDeregisterRequests => def_node("client.api.catalog_deregister", "Catalog deregistrations received over HTTP."),
        AgentServiceRegisters => def("agent.service.registers", "Services registered through the agent API (praetor)."),
        CheckRuns => def("agent.checks.runs", "Check probes run (praetor)."),
        CheckStatusChanges => def("agent.checks.status_changes", "Local check status transitions (praetor)."),
        SyncRounds => def("agent.anti_entropy.syncs", "Anti-entropy rounds that sent changes (praetor)."),
        FullSyncs => def("agent.anti_entropy.full_syncs", "Anti-entropy full comparisons against the catalog (praetor)."),
        SyncOperations => def("agent.anti_entropy.operations", "Catalog operations sent by anti-entropy (praetor)."),
        SyncErrors => def("agent.anti_entropy.errors", "Anti-entropy operations refused or lost (praetor)."),
        TelemetryDatagramsDropped => def("agent.telemetry.datagrams_dropped", "statsd or dogstatsd datagrams that could not be sent (praetor)."),
    }
}

catalogue! {
    /// Timers and samples: distributions (Prometheus `summary`, statsd `|ms`).
    Sample {
        RaftCommitTime => def("raft.commitTime", "Time from the leader appending an entry to its commit, in ms."),
        RaftFsmApply => def("raft.fsm.apply", "Time the raft thread spent applying one batch of committed entries to the store, in ms."),
        RaftLeaderDispatchLog => def("raft.leader.dispatchLog", "Time the leader took to make a batch of log entries durable, in ms."),
        RaftLeaderDispatchNumLogs => def("raft.leader.dispatchNumLogs", "Entries the leader wrote to its log in one batch."),
        RaftLeaderLastContact => def("raft.leader.lastContact", "Time since the leader last heard from each follower, sampled, in ms."),
        RaftSnapshotCreate => def("raft.snapshot.create", "Time to start a snapshot of the store (capturing the version), in ms."),
        RaftSnapshotPersist => def("raft.snapshot.persist", "Time to write a snapshot to disk, in ms."),
        RaftSnapshotTakeSnapshot => def("raft.snapshot.takeSnapshot", "Time from asking for a snapshot to having it durable, in ms."),
        RaftRpcInstallSnapshot => def("raft.rpc.installSnapshot", "Time a follower took to store a snapshot sent by the leader, in ms."),
        KvsApply => def("kvs.apply", "Time to complete a KV write on the leader, in ms."),
        TxnApply => def("txn.apply", "Time to complete a transaction on the leader, in ms."),
        CatalogRegister => def("catalog.register", "Time to complete a catalog registration on the leader, in ms."),
        CatalogDeregister => def("catalog.deregister", "Time to complete a catalog deregistration on the leader, in ms."),
        SessionApply => def("session.apply", "Time to complete a session create or destroy on the leader, in ms."),
        PreparedQueryApply => def("prepared-query.apply", "Time to complete a prepared-query write on the leader, in ms."),
        ConfigEntryApply => def("config_entry.apply", "Time to complete a config entry write (intentions included) on the leader, in ms."),
        AclResolveToken => def("acl.ResolveToken", "Time to resolve a token to its authorizer, in ms."),
        AclTokenUpsert => def("acl.token.upsert", "Time to complete a token create or update on the leader, in ms."),
        AclTokenClone => def("acl.token.clone", "Time to complete a token clone on the leader, in ms."),
        AclTokenDelete => def("acl.token.delete", "Time to complete a token delete on the leader, in ms."),
        AclPolicyUpsert => def("acl.policy.upsert", "Time to complete a policy create or update on the leader, in ms."),
        AclPolicyDelete => def("acl.policy.delete", "Time to complete a policy delete on the leader, in ms."),
        AclRoleUpsert => def("acl.role.upsert", "Time to complete a role create or update on the leader, in ms."),
        AclRoleDelete => def("acl.role.delete", "Time to complete a role delete on the leader, in ms."),
        AclAuthMethodUpsert => def("acl.authmethod.upsert", "Time to complete an auth method create or update on the leader, in ms."),
        AclAuthMethodDelete => def("acl.authmethod.delete", "Time to complete an auth method delete on the leader, in ms."),
        AclBindingRuleUpsert => def("acl.bindingrule.upsert", "Time to complete a binding rule create or update on the leader, in ms."),
        AclBindingRuleDelete => def("acl.bindingrule.delete", "Time to complete a binding rule delete on the leader, in ms."),
        AclLogout => def("acl.logout", "Time to complete a logout on the leader, in ms."),
        DnsDomainQuery => def_node("dns.domain_query", "Time to answer a DNS query in the Consul domain, in ms."),
        DnsPtrQuery => def_node("dns.ptr_query", "Time to answer a reverse (PTR) DNS query, in ms."),
        LeaderReconcile => def("leader.reconcile", "Time the leader took to reconcile gossip members into the catalog, in ms."),
    }
}

catalogue! {
    /// Gauges: values sampled when a sink reads them (Prometheus `gauge`, statsd `|g`).
    /// Consul prefixes gauge names with the host name unless `disable_hostname` is set.
    Gauge {
        RuntimeAllocBytes => def("runtime.alloc_bytes", "Resident memory of the agent process, in bytes."),
        RuntimeSysBytes => def("runtime.sys_bytes", "Virtual memory the agent process mapped, in bytes."),
        RuntimeNumGoroutines => def("runtime.num_goroutines", "Operating-system threads of the agent process (praetor runs no goroutines)."),
        RuntimeTotalGcPauseNs => def("runtime.total_gc_pause_ns", "Garbage-collection pause time: praetor has no garbage collector, always 0."),
        RuntimeTotalGcRuns => def("runtime.total_gc_runs", "Garbage collections: praetor has no garbage collector, always 0."),
        RaftAppliedIndex => def("raft.applied_index", "Raft index of the store version this agent serves."),
        RaftLastIndex => def("raft.last_index", "Last Raft index in this server's log."),
        RaftCommitIndex => def("raft.commit_index", "Raft commit index this server knows."),
        ServerIsLeader => def("server.isLeader", "1 when this server is the Raft leader, else 0."),
        AutopilotHealthy => def("autopilot.healthy", "1 when autopilot considers every server healthy, 0 if not; NaN on servers that do not lead."),
        AutopilotFailureTolerance => def("autopilot.failure_tolerance", "Voters that could fail without losing quorum; NaN on servers that do not lead."),
        SessionTtlActive => def("session_ttl.active", "Sessions with a TTL timer."),
        StateNodes => def("state.nodes", "Nodes in the catalog."),
        StateServices => def("state.services", "Distinct services in the catalog."),
        StateServiceInstances => def("state.service_instances", "Service instances in the catalog."),
        StateBillableServiceInstances => def("state.billable_service_instances", "Service instances that are neither proxies, gateways nor the consul service."),
        StateConnectInstances => def("state.connect_instances", "Connect service instances by kind."),
        StateKvEntries => def("state.kv_entries", "Keys in the KV store."),
        StateSessions => def("state.sessions", "Sessions in the store (praetor)."),
        MembersClients => def("members.clients", "Client agents in the LAN gossip pool."),
        MembersServers => def("members.servers", "Servers in the LAN gossip pool."),
        AgentLocalServices => def("agent.local.services", "Services registered on this agent (praetor)."),
        AgentLocalChecks => def("agent.local.checks", "Checks registered on this agent (praetor)."),
        HttpParkedQueries => def("http.parked_queries", "Blocking queries parked on shard 0 (praetor)."),
        RuntimeShards => def("runtime.shards", "Shard threads serving requests (praetor)."),
        RuntimeUptimeSeconds => def("runtime.uptime_seconds", "Seconds since the agent started (praetor)."),
    }
}

/// The timer Consul records for a write on the leader, by what the write does.
pub fn write_sample(command: &crate::store::Command) -> Option<Sample> {
    use crate::store::acl::AclOp;
    use crate::store::catalog::apply::CatalogOp;
    use crate::store::Command;
    Some(match command {
        Command::Kv(_) => Sample::KvsApply,
        Command::Txn(_) => Sample::TxnApply,
        Command::Session(_) => Sample::SessionApply,
        Command::Catalog(CatalogOp::Deregister { .. }) => Sample::CatalogDeregister,
        Command::Catalog(_) => Sample::CatalogRegister,
        Command::Acl(op) => match op {
            AclOp::TokenSet(_) | AclOp::Bootstrap { .. } | AclOp::InitialManagement { .. } => {
                Sample::AclTokenUpsert
            }
            AclOp::TokenClone { .. } => Sample::AclTokenClone,
            AclOp::TokenDelete { .. } => Sample::AclTokenDelete,
            AclOp::Logout { .. } => Sample::AclLogout,
            AclOp::PolicySet(_) => Sample::AclPolicyUpsert,
            AclOp::PolicyDelete { .. } => Sample::AclPolicyDelete,
            AclOp::RoleSet(_) => Sample::AclRoleUpsert,
            AclOp::RoleDelete { .. } => Sample::AclRoleDelete,
            AclOp::AuthMethodSet(_) => Sample::AclAuthMethodUpsert,
            AclOp::AuthMethodDelete { .. } => Sample::AclAuthMethodDelete,
            AclOp::BindingRuleSet(_) => Sample::AclBindingRuleUpsert,
            AclOp::BindingRuleDelete { .. } => Sample::AclBindingRuleDelete,
            AclOp::Initialize { .. } | AclOp::ReapExpiredTokens { .. } => return None,
        },
        Command::Query(_) => Sample::PreparedQueryApply,
        Command::ConfigEntry(_) => Sample::ConfigEntryApply,
        // The agent CA row is written once in a cluster's life, and the Connect CA's writes
        // are the leader's own rare duties, and so are federation states (at most one write
        // per datacenter every few seconds): nothing worth a timer.
        Command::Restore(_)
        | Command::Autopilot(_)
        | Command::AgentCa(_)
        | Command::Ca(_)
        | Command::FederationState(_)
        // Peering writes are operator actions and the peer stream's rare updates.
        | Command::Peering(_) => return None,
    })
}

/// `consul.api.http` (labels `method`, `path`): a timer per route and method.
pub const API_HTTP: Def = def(
    "api.http",
    "Time to answer an HTTP API request, by method and route, in ms.",
);

// ---------------------------------------------------------------------------------------
// Histograms.

/// Exact buckets for the smallest values, then this many per power of two.
const SUB_BUCKET_BITS: u32 = 3;
const SUB_BUCKETS: usize = 1 << SUB_BUCKET_BITS;
/// Values of 2^MSB_MAX thousandths (about 19 hours as a timer) and more share the last
/// bucket.
const MSB_MAX: u32 = 36;
/// Buckets per histogram.
pub const BUCKETS: usize = SUB_BUCKETS + (MSB_MAX - SUB_BUCKET_BITS + 1) as usize * SUB_BUCKETS;

/// The bucket a stored value (in thousandths of its display unit) falls in.
#[inline]
pub fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let msb = 63 - value.leading_zeros();
    if msb > MSB_MAX {
        return BUCKETS - 1;
    }
    let sub = ((value >> (msb - SUB_BUCKET_BITS)) as usize) & (SUB_BUCKETS - 1);
    SUB_BUCKETS + (msb - SUB_BUCKET_BITS) as usize * SUB_BUCKETS + sub
}

/// The stored values bucket `index` holds: `[low, high)`.
pub fn bucket_bounds(index: usize) -> (u64, u64) {
    debug_assert!(index < BUCKETS);
    if index < SUB_BUCKETS {
        return (index as u64, index as u64 + 1);
    }
    let octave = ((index - SUB_BUCKETS) / SUB_BUCKETS) as u32;
    let sub = ((index - SUB_BUCKETS) % SUB_BUCKETS) as u64;
    let shift = octave;
    let low = (SUB_BUCKETS as u64 + sub) << shift;
    (low, low + (1 << shift))
}

/// go-metrics' prefix filter: the longest matching prefix of the full name (with the
/// metrics prefix, and for gauges the host name) decides; without a match, `default`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrefixFilter {
    pub allowed: Vec<String>,
    pub blocked: Vec<String>,
    pub default_allow: bool,
}

impl PrefixFilter {
    pub fn allows(&self, name: &str) -> bool {
        let longest = |prefixes: &[String]| {
            prefixes
                .iter()
                .filter(|p| name.starts_with(p.as_str()))
                .map(String::len)
                .max()
        };
        match (longest(&self.allowed), longest(&self.blocked)) {
            (None, None) => self.default_allow,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            // go-metrics keeps one radix tree; an equal prefix in both lists ends up blocked.
            (Some(allow), Some(block)) => allow > block,
        }
    }
}

/// How the sinks name things: the `metrics_prefix`, the host name gauges carry unless
/// `disable_hostname`, the node name of `node` labels, and the filter.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Naming {
    pub prefix: String,
    /// `Some(host)` when gauges are prefixed with the host name.
    pub hostname: Option<String>,
    pub node_name: String,
    pub filter: PrefixFilter,
}

impl Naming {
    /// The full dotted name: `<prefix>.<name>`, gauges as `<prefix>.<host>.<name>`.
    pub fn full_name(&self, name: &str, gauge: bool) -> String {
        let mut out = String::with_capacity(self.prefix.len() + name.len() + 24);
        if !self.prefix.is_empty() {
            out.push_str(&self.prefix);
            out.push('.');
        }
        if let (true, Some(host)) = (gauge, &self.hostname) {
            out.push_str(host);
            out.push('.');
        }
        out.push_str(name);
        out
    }
}

/// Which metrics the prefix filter lets through, decided once per name from a [`Naming`]:
/// the recorders skip what is filtered out, and the renderings leave it out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Enabled {
    pub counters: [bool; Counter::COUNT],
    pub samples: [bool; Sample::COUNT],
    pub gauges: [bool; Gauge::COUNT],
    pub api_http: bool,
}

impl Default for Enabled {
    /// Everything, as go-metrics records before a filter is configured.
    fn default() -> Self {
        Enabled {
            counters: [true; Counter::COUNT],
            samples: [true; Sample::COUNT],
            gauges: [true; Gauge::COUNT],
            api_http: true,
        }
    }
}

impl Enabled {
    /// Counters and samples by their full name; gauges by theirs with the host name.
    pub fn from_naming(naming: &Naming) -> Enabled {
        let allows = |name: &str, gauge: bool| naming.filter.allows(&naming.full_name(name, gauge));
        let mut enabled = Enabled::default();
        for counter in Counter::ALL {
            enabled.counters[*counter as usize] = allows(counter.def().name, false);
        }
        for sample in Sample::ALL {
            enabled.samples[*sample as usize] = allows(sample.def().name, false);
        }
        for gauge in Gauge::ALL {
            enabled.gauges[*gauge as usize] = allows(gauge.def().name, true);
        }
        enabled.api_http = allows(API_HTTP.name, false);
        enabled
    }

    pub fn counter(&self, counter: Counter) -> bool {
        self.counters[counter as usize]
    }

    pub fn sample(&self, sample: Sample) -> bool {
        self.samples[sample as usize]
    }

    pub fn gauge(&self, gauge: Gauge) -> bool {
        self.gauges[gauge as usize]
    }
}

// ---------------------------------------------------------------------------------------
// Snapshots.

/// A histogram's buckets that hold anything, in index order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistSnapshot {
    pub count: u64,
    /// Sum of the stored values (thousandths of the display unit).
    pub sum: u64,
    pub buckets: Vec<(u16, u64)>,
}

impl HistSnapshot {
    pub fn merge(&mut self, other: &HistSnapshot) {
        self.count += other.count;
        self.sum = self.sum.wrapping_add(other.sum);
        let mut merged = Vec::with_capacity(self.buckets.len() + other.buckets.len());
        let (mut a, mut b) = (
            self.buckets.iter().peekable(),
            other.buckets.iter().peekable(),
        );
        loop {
            match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x.0 == y.0 => {
                    merged.push((x.0, x.1 + y.1));
                    a.next();
                    b.next();
                }
                (Some(x), Some(y)) if x.0 < y.0 => {
                    merged.push(**x);
                    a.next();
                }
                (Some(_), Some(y)) => {
                    merged.push(**y);
                    b.next();
                }
                (Some(x), None) => {
                    merged.push(**x);
                    a.next();
                }
                (None, Some(y)) => {
                    merged.push(**y);
                    b.next();
                }
                (None, None) => break,
            }
        }
        self.buckets = merged;
    }

    /// What was observed after `earlier` was taken (counts only grow).
    fn since(&self, earlier: &HistSnapshot) -> HistSnapshot {
        let mut buckets = Vec::with_capacity(self.buckets.len());
        let mut old = earlier.buckets.iter().peekable();
        for &(index, n) in &self.buckets {
            while old.peek().is_some_and(|(i, _)| *i < index) {
                old.next();
            }
            let before = match old.peek() {
                Some(&&(i, m)) if i == index => m,
                _ => 0,
            };
            if n > before {
                buckets.push((index, n - before));
            }
        }
        HistSnapshot {
            count: self.count.saturating_sub(earlier.count),
            sum: self.sum.wrapping_sub(earlier.sum),
            buckets,
        }
    }

    /// The value (in display units) below which a fraction `q` of observations fall,
    /// interpolated linearly inside its bucket; NaN when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        debug_assert!((0.0..=1.0).contains(&q));
        if self.count == 0 {
            return f64::NAN;
        }
        let rank = q * self.count as f64;
        let mut seen = 0u64;
        for &(index, n) in &self.buckets {
            if (seen + n) as f64 >= rank {
                let (low, high) = bucket_bounds(index as usize);
                let within = ((rank - seen as f64) / n as f64).clamp(0.0, 1.0);
                let value = low as f64 + within * (high - low) as f64;
                return value / 1000.0;
            }
            seen += n;
        }
        let last = self.buckets.last().map(|b| b.0 as usize).unwrap_or(0);
        bucket_bounds(last).1 as f64 / 1000.0
    }

    /// Smallest and largest observation as far as buckets tell (display units).
    fn min_max(&self) -> (f64, f64) {
        let low = self.buckets.first().map(|b| bucket_bounds(b.0 as usize).0);
        let high = self
            .buckets
            .last()
            .map(|b| bucket_bounds(b.0 as usize).1.saturating_sub(1));
        (
            low.unwrap_or(0) as f64 / 1000.0,
            high.unwrap_or(0) as f64 / 1000.0,
        )
    }

    /// go-metrics' sample standard deviation, from bucket midpoints.
    fn stddev(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let mut sum_sq = 0.0;
        for &(index, n) in &self.buckets {
            let (low, high) = bucket_bounds(index as usize);
            let mid = (low as f64 + (high - 1) as f64) / 2.0 / 1000.0;
            sum_sq += mid * mid * n as f64;
        }
        let sum = self.sum as f64 / 1000.0;
        let count = self.count as f64;
        let variance = (count * sum_sq - sum * sum) / (count * (count - 1.0));
        variance.max(0.0).sqrt()
    }
}

/// Every recorder merged: counters as (increments, total), histograms by slot, with what
/// the renderings need to print them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub counters: Vec<(u64, u64)>,
    pub samples: Vec<Option<HistSnapshot>>,
    /// By `api.http` slot.
    pub http: Vec<Option<HistSnapshot>>,
    /// The `api.http` label pair of each slot: (method, path label).
    pub http_series: &'static [(&'static str, String)],
    /// What the prefix filter lets through when the snapshot was taken.
    pub enabled: Enabled,
}

impl Snapshot {
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let diff = |now: &Option<HistSnapshot>, then: Option<&Option<HistSnapshot>>| match (
            now,
            then.and_then(Option::as_ref),
        ) {
            (Some(now), Some(then)) => Some(now.since(then)).filter(|h| h.count > 0),
            (Some(now), None) => Some(now.clone()),
            (None, _) => None,
        };
        Snapshot {
            http_series: self.http_series,
            enabled: self.enabled,
            counters: self
                .counters
                .iter()
                .zip(&earlier.counters)
                .map(|(now, then)| (now.0.saturating_sub(then.0), now.1.wrapping_sub(then.1)))
                .collect(),
            samples: self
                .samples
                .iter()
                .enumerate()
                .map(|(i, h)| diff(h, earlier.samples.get(i)))
                .collect(),
            http: self
                .http
                .iter()
                .enumerate()
                .map(|(i, h)| diff(h, earlier.http.get(i)))
                .collect(),
        }
    }

    pub fn counter(&self, counter: Counter) -> (u64, u64) {
        self.counters
            .get(counter as usize)
            .copied()
            .unwrap_or((0, 0))
    }

    pub fn sample(&self, sample: Sample) -> Option<&HistSnapshot> {
        self.samples.get(sample as usize).and_then(Option::as_ref)
    }
}

/// Adds `part` to a running merge.
pub fn merge_into(total: &mut Option<HistSnapshot>, part: Option<HistSnapshot>) {
    match (total.as_mut(), part) {
        (Some(total), Some(part)) => total.merge(&part),
        (None, Some(part)) => *total = Some(part),
        (_, None) => {}
    }
}

// ---------------------------------------------------------------------------------------
// Gauges.

/// A gauge's value at one scrape, with its labels (`state.connect_instances` has `kind`).
#[derive(Clone, Debug, PartialEq)]
pub struct GaugeValue {
    pub gauge: Gauge,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

impl GaugeValue {
    pub fn new(gauge: Gauge, value: f64) -> GaugeValue {
        GaugeValue {
            gauge,
            labels: Vec::new(),
            value,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Windows: what the sinks compare against.

/// go-metrics' in-memory interval (and `/v1/agent/metrics`' unit): 10 seconds.
pub const INTERVAL_MS: u64 = 10_000;
/// The Prometheus summaries' window (go-metrics' `MaxAge`): quantiles cover the last 10 s.
pub const SUMMARY_WINDOW_MS: u64 = 10_000;
/// How often the runtime samples the recorders into [`Windows`].
pub const SAMPLE_INTERVAL_MS: u64 = 1_000;
/// Samples kept for the summary window (one per second, plus the one at its start).
const WINDOW_SAMPLES_MAX: usize = (SUMMARY_WINDOW_MS / SAMPLE_INTERVAL_MS) as usize + 1;
/// Interval boundaries kept: the finished interval needs its two ends.
const INTERVALS_KEPT: usize = 3;

/// Snapshots over time: a second-by-second ring for the summary window, snapshots at the
/// 10-second interval boundaries (wall-clock aligned, as go-metrics' intervals), and when
/// each `api.http` series last moved (for `prometheus_retention_time`).
#[derive(Debug, Default)]
pub struct Windows {
    ring: std::collections::VecDeque<(u64, Snapshot)>,
    /// (interval start in Unix ms, the snapshot taken then).
    boundaries: std::collections::VecDeque<(u64, Snapshot)>,
    http_changed_ms: Vec<u64>,
    last: Option<Snapshot>,
}

impl Windows {
    /// Takes in a snapshot taken at `now_unix_ms`. Returns the interval that just ended,
    /// when this sample crossed a boundary: (its start, what happened in it).
    pub fn record(&mut self, now_unix_ms: u64, snapshot: Snapshot) -> Option<(u64, Snapshot)> {
        let interval_start = now_unix_ms - now_unix_ms % INTERVAL_MS;
        let mut finished = None;
        match self.boundaries.back() {
            None => self
                .boundaries
                .push_back((interval_start, snapshot.clone())),
            Some((start, at_start)) if *start < interval_start => {
                finished = Some((*start, snapshot.since(at_start)));
                self.boundaries
                    .push_back((interval_start, snapshot.clone()));
                while self.boundaries.len() > INTERVALS_KEPT {
                    self.boundaries.pop_front();
                }
            }
            Some(_) => {}
        }
        if self.http_changed_ms.len() < snapshot.http.len() {
            self.http_changed_ms.resize(snapshot.http.len(), 0);
        }
        for (slot, histogram) in snapshot.http.iter().enumerate() {
            let before = self
                .last
                .as_ref()
                .and_then(|l| l.http.get(slot))
                .and_then(Option::as_ref)
                .map_or(0, |h| h.count);
            if histogram.as_ref().map_or(0, |h| h.count) != before {
                self.http_changed_ms[slot] = now_unix_ms;
            }
        }
        self.ring.push_back((now_unix_ms, snapshot.clone()));
        while self.ring.len() > WINDOW_SAMPLES_MAX {
            self.ring.pop_front();
        }
        self.last = Some(snapshot);
        finished
    }

    /// The snapshot at the start of the summary window ending `now_unix_ms`: the oldest
    /// kept sample no older than the window.
    fn window_start(&self, now_unix_ms: u64) -> Option<&Snapshot> {
        self.ring
            .iter()
            .find(|(at, _)| now_unix_ms.saturating_sub(*at) <= SUMMARY_WINDOW_MS)
            .map(|(_, s)| s)
    }

    /// The interval `/v1/agent/metrics` shows: the last finished one, or the current one
    /// (up to `now`) when none has finished, as go-metrics' `DisplayMetrics`.
    pub fn display_interval(&self, now: &Snapshot) -> (u64, Snapshot) {
        let n = self.boundaries.len();
        if n >= 2 {
            let (start, at_start) = &self.boundaries[n - 2];
            let (_, at_end) = &self.boundaries[n - 1];
            (*start, at_end.since(at_start))
        } else if let Some((start, at_start)) = self.boundaries.back() {
            (*start, now.since(at_start))
        } else {
            (0, now.clone())
        }
    }

    fn http_fresh(&self, slot: usize, now_unix_ms: u64, retention_ms: u64) -> bool {
        self.http_changed_ms
            .get(slot)
            .is_some_and(|at| now_unix_ms.saturating_sub(*at) <= retention_ms)
    }
}

// ---------------------------------------------------------------------------------------
// Rendering.

/// Go's `time.Time.String()` of a UTC instant rounded to the second:
/// `2006-01-02 15:04:05 +0000 UTC`.
pub fn go_utc_timestamp(unix_ms: u64) -> String {
    let secs = ((unix_ms + 500) / 1000) as i64;
    match time::OffsetDateTime::from_unix_timestamp(secs) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} +0000 UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => "1970-01-01 00:00:00 +0000 UTC".to_string(),
    }
}

fn labels_json(labels: &[(&str, String)]) -> serde_json::Value {
    serde_json::Value::Object(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.clone())))
            .collect(),
    )
}

fn node_labels(def: &Def, naming: &Naming) -> Vec<(&'static str, String)> {
    if def.node_label {
        vec![("node", naming.node_name.clone())]
    } else {
        Vec::new()
    }
}

/// A finite f64 for JSON (NaN and infinities have no JSON form; go-metrics would fail).
fn json_number(value: f64) -> serde_json::Value {
    serde_json::Number::from_f64(value)
        .map(serde_json::Value::Number)
        .unwrap_or(serde_json::Value::Null)
}

fn sampled_json(
    name: String,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    stddev: f64,
    labels: &[(&str, String)],
) -> serde_json::Value {
    let interval_secs = INTERVAL_MS as f64 / 1000.0;
    let mean = if count > 0 { sum / count as f64 } else { 0.0 };
    serde_json::json!({
        "Name": name,
        "Count": count,
        "Rate": json_number(sum / interval_secs),
        "Sum": json_number(sum),
        "Min": json_number(min),
        "Max": json_number(max),
        "Mean": json_number(mean),
        "Stddev": json_number(stddev),
        "Labels": labels_json(labels),
    })
}

/// go-metrics' `MetricsSummary` of one interval: `Timestamp` (the interval's start),
/// `Gauges`, `Points`, `Counters`, `Samples`. Counters and samples appear when they moved
/// in the interval. A counter's Min and Max are its mean increment (praetor keeps counts
/// and totals, not each increment); a sample's come from its buckets.
pub fn summary_json(
    interval_start_unix_ms: u64,
    interval: &Snapshot,
    gauges: &[GaugeValue],
    naming: &Naming,
) -> serde_json::Value {
    let mut gauges_out: Vec<(String, serde_json::Value)> = gauges
        .iter()
        .filter(|g| interval.enabled.gauge(g.gauge))
        .map(|g| {
            let name = naming.full_name(g.gauge.def().name, true);
            let key = format!("{name}{:?}", g.labels);
            let value = serde_json::json!({
                "Name": name,
                "Value": json_number(g.value),
                "Labels": labels_json(&g.labels),
            });
            (key, value)
        })
        .collect();
    gauges_out.sort_by(|a, b| a.0.cmp(&b.0));
    let mut counters = Vec::new();
    for counter in Counter::ALL {
        let (count, total) = interval.counter(*counter);
        if count == 0 || !interval.enabled.counter(*counter) {
            continue;
        }
        let def = counter.def();
        let mean = total as f64 / count as f64;
        counters.push(sampled_json(
            naming.full_name(def.name, false),
            count,
            total as f64,
            mean,
            mean,
            0.0,
            &node_labels(def, naming),
        ));
    }
    let mut samples = Vec::new();
    for sample in Sample::ALL {
        let Some(h) = interval.sample(*sample) else {
            continue;
        };
        if !interval.enabled.sample(*sample) {
            continue;
        }
        let def = sample.def();
        let (min, max) = h.min_max();
        samples.push(sampled_json(
            naming.full_name(def.name, false),
            h.count,
            h.sum as f64 / 1000.0,
            min,
            max,
            h.stddev(),
            &node_labels(def, naming),
        ));
    }
    let series = interval.http_series;
    for (slot, h) in interval.http.iter().enumerate() {
        let (Some(h), Some((method, path))) = (h, series.get(slot)) else {
            continue;
        };
        let (min, max) = h.min_max();
        samples.push(sampled_json(
            naming.full_name(API_HTTP.name, false),
            h.count,
            h.sum as f64 / 1000.0,
            min,
            max,
            h.stddev(),
            &[("method", method.to_string()), ("path", path.clone())],
        ));
    }
    serde_json::json!({
        "Timestamp": go_utc_timestamp(interval_start_unix_ms),
        "Gauges": gauges_out.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        "Points": [],
        "Counters": counters,
        "Samples": samples,
    })
}

/// The Prometheus form of a dotted name: go-metrics replaces ` .=-/` with `_`.
pub fn prometheus_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ' ' | '.' | '=' | '-' | '/' => '_',
            c => c,
        })
        .collect()
}

fn prometheus_labels(out: &mut String, labels: &[(&str, String)], quantile: Option<&str>) {
    if labels.is_empty() && quantile.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (name, value) in labels {
        if !first {
            out.push(',');
        }
        first = false;
        let escaped = value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(out, "{name}=\"{escaped}\"");
    }
    if let Some(q) = quantile {
        if !first {
            out.push(',');
        }
        let _ = write!(out, "quantile=\"{q}\"");
    }
    out.push('}');
}

fn prometheus_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{value}")
    }
}

/// Quantiles of Consul's summaries (go-metrics' Prometheus sink objectives).
pub const QUANTILES: [(f64, &str); 3] = [(0.5, "0.5"), (0.9, "0.9"), (0.99, "0.99")];

fn prometheus_summary(
    out: &mut String,
    name: &str,
    labels: &[(&str, String)],
    window: Option<&HistSnapshot>,
    total: Option<&HistSnapshot>,
) {
    for (q, text) in QUANTILES {
        out.push_str(name);
        prometheus_labels(out, labels, Some(text));
        let value = window.map_or(f64::NAN, |h| h.quantile(q));
        let _ = writeln!(out, " {}", prometheus_value(value));
    }
    let (sum, count) = total.map_or((0.0, 0), |h| (h.sum as f64 / 1000.0, h.count));
    let _ = write!(out, "{name}_sum");
    prometheus_labels(out, labels, None);
    let _ = writeln!(out, " {}", prometheus_value(sum));
    let _ = write!(out, "{name}_count");
    prometheus_labels(out, labels, None);
    let _ = writeln!(out, " {count}");
}

/// The Prometheus text exposition (format 0.0.4): every catalogued metric (as go-metrics
/// declares Consul's definitions, so a series exists before its first event), summaries
/// with the 0.5/0.9/0.99 quantiles of the last [`SUMMARY_WINDOW_MS`] and cumulative
/// `_sum`/`_count`; `api.http` series not updated within `retention_ms` are left out.
pub fn render_prometheus(
    now_unix_ms: u64,
    total: &Snapshot,
    windows: &Windows,
    gauges: &[GaugeValue],
    naming: &Naming,
    retention_ms: u64,
) -> Vec<u8> {
    let window = windows
        .window_start(now_unix_ms)
        .map(|start| total.since(start))
        .unwrap_or_else(|| total.clone());
    let mut out = String::with_capacity(16 * 1024);
    let header = |out: &mut String, name: &str, help: &str, kind: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    let mut gauges_by_name: Vec<(String, &GaugeValue)> = gauges
        .iter()
        .filter(|g| total.enabled.gauge(g.gauge))
        .map(|g| {
            (
                prometheus_name(&naming.full_name(g.gauge.def().name, true)),
                g,
            )
        })
        .collect();
    gauges_by_name.sort_by(|a, b| a.0.cmp(&b.0));
    let mut previous = None;
    for (name, g) in &gauges_by_name {
        if previous != Some(name) {
            header(&mut out, name, g.gauge.def().help, "gauge");
            previous = Some(name);
        }
        out.push_str(name);
        prometheus_labels(&mut out, &g.labels, None);
        let _ = writeln!(out, " {}", prometheus_value(g.value));
    }
    for counter in Counter::ALL {
        if !total.enabled.counter(*counter) {
            continue;
        }
        let def = counter.def();
        let name = prometheus_name(&naming.full_name(def.name, false));
        header(&mut out, &name, def.help, "counter");
        out.push_str(&name);
        prometheus_labels(&mut out, &node_labels(def, naming), None);
        let _ = writeln!(out, " {}", total.counter(*counter).1);
    }
    for sample in Sample::ALL {
        if !total.enabled.sample(*sample) {
            continue;
        }
        let def = sample.def();
        let name = prometheus_name(&naming.full_name(def.name, false));
        header(&mut out, &name, def.help, "summary");
        prometheus_summary(
            &mut out,
            &name,
            &node_labels(def, naming),
            window.sample(*sample),
            total.sample(*sample),
        );
    }
    let series = total.http_series;
    let name = prometheus_name(&naming.full_name(API_HTTP.name, false));
    let mut wrote_header = false;
    for (slot, h) in total.http.iter().enumerate() {
        let (Some(h), Some((method, path))) = (h, series.get(slot)) else {
            continue;
        };
        if !windows.http_fresh(slot, now_unix_ms, retention_ms) && retention_ms > 0 {
            continue;
        }
        if !wrote_header {
            header(&mut out, &name, API_HTTP.help, "summary");
            wrote_header = true;
        }
        let labels = [("method", method.to_string()), ("path", path.clone())];
        let in_window = window.http.get(slot).and_then(Option::as_ref);
        prometheus_summary(&mut out, &name, &labels, in_window, Some(h));
    }
    out.into_bytes()
}

/// statsd's form of a dotted name: go-metrics replaces `:` and spaces with `_`.
fn statsd_name(name: &str) -> String {
    name.chars()
        .map(|c| if c == ':' || c == ' ' { '_' } else { c })
        .collect()
}

/// Which line protocol a UDP sink speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineFormat {
    /// statsd: labels are appended to the name (`consul.api.http.GET.v1_kv_`).
    Statsd,
    /// dogstatsd: labels and the configured tags go in `|#k:v,…`.
    Dogstatsd { tags: Vec<String> },
}

/// The lines of one flush: counters' increments since the last flush (`|c`), every
/// gauge (`|g`), and each sample bucket that moved as one timing with a sample rate
/// (`value|ms|@1/n`), which statsd servers expand back to `n` observations.
pub fn statsd_lines(
    since_last_flush: &Snapshot,
    gauges: &[GaugeValue],
    naming: &Naming,
    format: &LineFormat,
) -> Vec<String> {
    let mut lines = Vec::new();
    let line =
        |name: &str, value: f64, kind: &str, rate: Option<f64>, labels: &[(&str, String)]| {
            let mut text = String::with_capacity(name.len() + 32);
            text.push_str(&statsd_name(name));
            if let LineFormat::Statsd = format {
                for (_, v) in labels {
                    text.push('.');
                    text.push_str(&statsd_name(v));
                }
            }
            let _ = write!(text, ":{value:.6}|{kind}");
            if let Some(rate) = rate.filter(|r| *r < 1.0) {
                let _ = write!(text, "|@{rate:.6}");
            }
            if let LineFormat::Dogstatsd { tags } = format {
                let all: Vec<String> = tags
                    .iter()
                    .cloned()
                    .chain(labels.iter().map(|(k, v)| format!("{k}:{v}")))
                    .collect();
                if !all.is_empty() {
                    text.push_str("|#");
                    text.push_str(&all.join(","));
                }
            }
            text
        };
    for g in gauges
        .iter()
        .filter(|g| since_last_flush.enabled.gauge(g.gauge))
    {
        if g.value.is_finite() {
            let name = naming.full_name(g.gauge.def().name, true);
            lines.push(line(&name, g.value, "g", None, &g.labels));
        }
    }
    for counter in Counter::ALL {
        let (count, total) = since_last_flush.counter(*counter);
        if count == 0 || !since_last_flush.enabled.counter(*counter) {
            continue;
        }
        let def = counter.def();
        let name = naming.full_name(def.name, false);
        lines.push(line(
            &name,
            total as f64,
            "c",
            None,
            &node_labels(def, naming),
        ));
    }
    let mut timings = |name: &str, h: &HistSnapshot, labels: &[(&str, String)]| {
        for &(index, n) in &h.buckets {
            let (low, high) = bucket_bounds(index as usize);
            let mid = (low as f64 + (high - 1) as f64) / 2.0 / 1000.0;
            lines.push(line(name, mid, "ms", Some(1.0 / n as f64), labels));
        }
    };
    for sample in Sample::ALL {
        if let (Some(h), true) = (
            since_last_flush.sample(*sample),
            since_last_flush.enabled.sample(*sample),
        ) {
            let def = sample.def();
            timings(
                &naming.full_name(def.name, false),
                h,
                &node_labels(def, naming),
            );
        }
    }
    let series = since_last_flush.http_series;
    for (slot, h) in since_last_flush.http.iter().enumerate() {
        if let (Some(h), Some((method, path))) = (h, series.get(slot)) {
            timings(
                &naming.full_name(API_HTTP.name, false),
                h,
                &[("method", method.to_string()), ("path", path.clone())],
            );
        }
    }
    lines
}

/// Packs lines into datagrams of at most `bytes_max` (go-metrics' statsd sink keeps them
/// under 1432 bytes); a longer line travels alone.
pub fn pack_datagrams(lines: &[String], bytes_max: usize) -> Vec<Vec<u8>> {
    let mut datagrams = Vec::new();
    let mut current: Vec<u8> = Vec::with_capacity(bytes_max);
    for line in lines {
        if !current.is_empty() && current.len() + line.len() + 1 > bytes_max {
            datagrams.push(std::mem::take(&mut current));
        }
        current.extend_from_slice(line.as_bytes());
        current.push(b'\n');
    }
    if !current.is_empty() {
        datagrams.push(current);
    }
    datagrams
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_in_order_within_an_eighth() {
        let mut previous = 0;
        for value in (0..10_000u64).chain([1 << 20, (1 << 36) - 1, 1 << 36, u64::MAX]) {
            let index = bucket_of(value);
            assert!(index < BUCKETS);
            assert!(
                index >= previous || value >= 1 << 20,
                "bucket order at {value}"
            );
            previous = index;
            let (low, high) = bucket_bounds(index);
            if value < 1 << 37 {
                assert!(
                    low <= value && value < high,
                    "{value} outside [{low}, {high})"
                );
                assert!((high - low) as f64 <= (low as f64 / 8.0).max(1.0));
            }
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    /// The histogram a recorder would hold after observing `values`.
    fn hist_of(values: &[u64]) -> HistSnapshot {
        let mut buckets = std::collections::BTreeMap::<u16, u64>::new();
        for v in values {
            *buckets.entry(bucket_of(*v) as u16).or_default() += 1;
        }
        HistSnapshot {
            count: values.len() as u64,
            sum: values.iter().sum(),
            buckets: buckets.into_iter().collect(),
        }
    }

    #[test]
    fn quantiles_fall_within_a_bucket_of_the_exact_ones() {
        // 1..=1000 ms in microseconds.
        let values: Vec<u64> = (1..=1000).map(|ms| ms * 1000).collect();
        let h = hist_of(&values);
        assert_eq!(h.count, 1000);
        assert_eq!(h.sum, 500_500_000);
        for (q, exact) in [(0.5, 500.0), (0.9, 900.0), (0.99, 990.0)] {
            let got = h.quantile(q);
            assert!((got - exact).abs() / exact < 0.07, "q{q}: {got} vs {exact}");
        }
        assert!(HistSnapshot::default().quantile(0.5).is_nan());
        let (min, max) = h.min_max();
        assert!((min - 1.0).abs() < 0.07 && (max - 1000.0).abs() < 70.0);
    }

    #[test]
    fn differences_and_merges_are_exact() {
        let a = hist_of(&[5, 5000, 70_000]);
        let b = hist_of(&[5, 9]);
        let mut both = a.clone();
        both.merge(&b);
        assert_eq!(both.count, 5);
        assert_eq!(both.since(&a), b);
        assert_eq!(both.since(&both).count, 0);
    }

    #[test]
    fn prefix_filters_take_the_longest_match() {
        let filter = PrefixFilter {
            allowed: vec!["consul.raft.apply".into()],
            blocked: vec!["consul.raft".into()],
            default_allow: true,
        };
        assert!(filter.allows("consul.raft.apply"));
        assert!(!filter.allows("consul.raft.commitTime"));
        assert!(filter.allows("consul.kvs.apply"));
        let closed = PrefixFilter {
            default_allow: false,
            ..PrefixFilter::default()
        };
        assert!(!closed.allows("consul.kvs.apply"));
    }

    #[test]
    fn names_carry_the_prefix_and_gauges_the_host() {
        let naming = Naming {
            prefix: "consul".into(),
            hostname: Some("host-1".into()),
            node_name: "n1".into(),
            filter: PrefixFilter::default(),
        };
        assert_eq!(
            naming.full_name("raft.commitTime", false),
            "consul.raft.commitTime"
        );
        assert_eq!(
            naming.full_name("runtime.alloc_bytes", true),
            "consul.host-1.runtime.alloc_bytes"
        );
        assert_eq!(
            prometheus_name("consul.host-1.runtime.alloc_bytes"),
            "consul_host_1_runtime_alloc_bytes"
        );
    }

    #[test]
    fn timestamps_print_as_go_does() {
        assert_eq!(go_utc_timestamp(0), "1970-01-01 00:00:00 +0000 UTC");
        assert_eq!(
            go_utc_timestamp(1_700_000_000_400),
            "2023-11-14 22:13:20 +0000 UTC"
        );
    }

    fn snapshot_with(counter: (u64, u64), reconcile: &[u64]) -> Snapshot {
        let mut s = Snapshot {
            counters: vec![(0, 0); Counter::COUNT],
            samples: vec![None; Sample::COUNT],
            ..Snapshot::default()
        };
        s.counters[Counter::RaftApply as usize] = counter;
        if !reconcile.is_empty() {
            s.samples[Sample::RaftCommitTime as usize] = Some(hist_of(reconcile));
        }
        s
    }

    #[test]
    fn windows_report_the_finished_interval_and_the_summary_window() {
        let mut windows = Windows::default();
        let t0 = 1_700_000_003_000;
        assert!(windows.record(t0, snapshot_with((0, 0), &[])).is_none());
        // Current interval only: shown up to now.
        let now = snapshot_with((2, 2), &[1000]);
        let (start, shown) = windows.display_interval(&now);
        assert_eq!(start, 1_700_000_000_000);
        assert_eq!(shown.counter(Counter::RaftApply), (2, 2));
        // Crossing the boundary finishes the interval.
        let finished = windows.record(t0 + 8_000, snapshot_with((5, 5), &[1000, 3000]));
        let (start, interval) = finished.unwrap();
        assert_eq!(start, 1_700_000_000_000);
        assert_eq!(interval.counter(Counter::RaftApply), (5, 5));
        let later = snapshot_with((9, 9), &[1000, 3000, 7000]);
        let (start, shown) = windows.display_interval(&later);
        assert_eq!(start, 1_700_000_000_000);
        assert_eq!(shown.counter(Counter::RaftApply), (5, 5));

        let naming = Naming {
            prefix: "consul".into(),
            ..Naming::default()
        };
        let text = String::from_utf8(render_prometheus(
            t0 + 13_500,
            &later,
            &windows,
            &[GaugeValue::new(Gauge::StateKvEntries, 3.0)],
            &naming,
            60_000,
        ))
        .unwrap();
        assert!(
            text.contains("# TYPE consul_raft_commitTime summary\n"),
            "{text}"
        );
        assert!(text.contains("consul_raft_commitTime_count 3\n"), "{text}");
        assert!(text.contains("consul_raft_commitTime_sum 11\n"), "{text}");
        assert!(text.contains("consul_raft_apply 9\n"), "{text}");
        assert!(text.contains("consul_state_kv_entries 3\n"), "{text}");
        // The window (the last 10 s) holds only the last observation, 7 ms.
        let median: f64 = text
            .lines()
            .find(|l| l.starts_with("consul_raft_commitTime{quantile=\"0.5\"}"))
            .and_then(|l| l.split(' ').nth(1))
            .unwrap()
            .parse()
            .unwrap();
        assert!((median - 7.0).abs() < 0.5, "{median}");
        assert!(
            text.contains("consul_kvs_apply{quantile=\"0.99\"} NaN\n"),
            "{text}"
        );

        let json = summary_json(start, &shown, &[], &naming);
        assert_eq!(json["Timestamp"], "2023-11-14 22:13:20 +0000 UTC");
        let counter = &json["Counters"][0];
        assert_eq!(counter["Name"], "consul.raft.apply");
        assert_eq!(counter["Count"], 5);
        assert_eq!(counter["Rate"], 0.5);
        let sample = &json["Samples"][0];
        assert_eq!(sample["Name"], "consul.raft.commitTime");
        assert_eq!(sample["Count"], 2);
        assert_eq!(sample["Sum"], 4.0);
    }

    #[test]
    fn statsd_lines_carry_increments_gauges_and_sampled_timings() {
        let naming = Naming {
            prefix: "consul".into(),
            hostname: Some("h".into()),
            node_name: "n".into(),
            filter: PrefixFilter::default(),
        };
        let delta = snapshot_with((2, 2), &[1000, 1000, 3000]);
        let gauges = [GaugeValue::new(Gauge::StateNodes, 4.0)];
        let lines = statsd_lines(&delta, &gauges, &naming, &LineFormat::Statsd);
        assert!(
            lines.contains(&"consul.h.state.nodes:4.000000|g".to_string()),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"consul.raft.apply:2.000000|c".to_string()),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("consul.raft.commitTime:") && l.ends_with("|ms|@0.500000")),
            "{lines:?}"
        );
        let tagged = statsd_lines(
            &delta,
            &[],
            &naming,
            &LineFormat::Dogstatsd {
                tags: vec!["env:test".into()],
            },
        );
        assert!(
            tagged.contains(&"consul.raft.apply:2.000000|c|#env:test".to_string()),
            "{tagged:?}"
        );
        let datagrams = pack_datagrams(&lines, 40);
        let lines_in = |d: &Vec<u8>| d.iter().filter(|b| **b == b'\n').count();
        assert!(datagrams.iter().all(|d| d.len() <= 40 || lines_in(d) == 1));
        assert_eq!(datagrams.iter().map(lines_in).sum::<usize>(), lines.len());
    }
}
