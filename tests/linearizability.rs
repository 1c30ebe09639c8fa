//! Reliability under faults: clients read, write, compare-and-set and insert keys on a
//! cluster of real servers while a nemesis, one fault every 5–10 s, kills a server with
//! SIGKILL and restarts it, pauses one (SIGSTOP, then SIGCONT) or cuts one off from the
//! others with iptables (`common/nemesis.rs`). After the run:
//!
//! - every key's history is checked with a Wing–Gong checker (no violation);
//! - every acknowledged insert is present at the end (no lost write);
//! - the Raft configuration never held fewer voters than a majority of the servers (a
//!   server that was only killed, paused or partitioned for seconds keeps its vote);
//! - availability is the share of operations that succeeded (some server answered); per
//!   one-second window of the client workload, it is the share of the operations that
//!   ended in the window that succeeded, and a window in which none ended is at 0%. Every
//!   window at 0% must overlap a fault of the leader — a leader's fault costs one election
//!   — and no run of them may last longer than [`LEADER_OUTAGE_MAX_WINDOWS`]; a follower's
//!   fault must cost no window.
//!
//! Clients behave as a Consul agent's server manager does: each keeps an order of servers,
//! sends to the first, and on a failure moves that server to the end and tries the next, so
//! an operation fails only when no server could serve it. The clients stand for a population
//! of agents, which Consul spreads over the servers (each agent shuffles its list, and
//! rebalances every few minutes); six clients that only move a failed server to the end
//! all end up on one server after two faults, and a pause of that follower would then stall
//! every client at once. So each client returns to its own order every
//! [`REBALANCE_INTERVAL`], keeping the spread of such a population, two clients a server.
//! A write whose outcome is unknown
//! stays in the history as a write that may have happened; retrying it elsewhere is a
//! second write of the same value.
//!
//! The same run goes with mutual TLS on the server port (`verify_incoming`,
//! `verify_outgoing`, `verify_server_hostname`) and default-deny ACLs, clients sending a
//! token. `LINEARIZABILITY_SECONDS` sets the fault phase (CI: 40 s; `tests/soak/faults.sh`
//! runs 120 s for the figures), `LINEARIZABILITY_SEED` replays a nemesis schedule,
//! `FAULTS_SERVERS` picks 3 or 5 servers for the ignored soak variant,
//! `FAULTS_FIGURES=<file>` appends the run's figures to that file as one JSON line, and
//! `FAULTS_KEEP_LOGS=<dir>` keeps the servers' logs there.

#[path = "it/support/common.rs"]
mod common;
#[path = "linearizability/checker.rs"]
mod linearizability;
#[path = "it/support/nemesis.rs"]
mod nemesis;

use common::{praetor_binary, try_request_bounded, Cluster, HttpResponse, TempDir};
use linearizability::{check, Event, Op, Outcome, Value};
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Keys of the register workload, each checked on its own.
const KEYS: usize = 16;
const CLIENTS: usize = 6;
/// One request to one server; past it the client tries the next server. Longer than an
/// election, which a server holds a request through (Consul's `rpc_hold_timeout`).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a client returns to its own order of servers (see the module's comment).
const REBALANCE_INTERVAL: Duration = Duration::from_secs(5);
/// A probe of the monitor or the nemesis; a paused server must not hold them up.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the nemesis waits for the servers to agree on a leader before a fault; past it
/// the fault goes ahead, judged as a follower's (the stricter judgement).
const LEADER_KNOWN_WAIT: Duration = Duration::from_secs(5);
/// How often the nemesis looks for a new leader while the leader is down.
const ELECTION_POLL: Duration = Duration::from_millis(100);
/// How often the monitor reads the Raft configuration.
const VOTER_SAMPLE_INTERVAL: Duration = Duration::from_millis(200);
/// The availability window.
const WINDOW: Duration = Duration::from_secs(1);
/// The longest run of windows at 0% a leader's fault may cost: one election with the
/// default timers (election timeout 1–2 s), plus the window the fault began in.
const LEADER_OUTAGE_MAX_WINDOWS: usize = 3;
/// After a fault ends, a window at 0% may still be its doing for this long (a restarted or
/// healed server's first heartbeats, a client's attempt that was waiting on it).
const FAULT_AFTERMATH: Duration = Duration::from_secs(2);
/// Healthy time between two faults, and how long a fault lasts, in milliseconds: a fault
/// begins every 5–10 s.
const GAP_MS: std::ops::Range<u64> = 3_000..5_001;
const FAULT_MS: std::ops::Range<u64> = 2_000..5_001;
/// The management token of the TLS + ACL cluster.
const MANAGEMENT: &str = "3f2c1a0e-5b4d-4c3e-9a8f-7e6d5c4b3a29";
/// Runs share the machine's cores: one cluster at a time.
static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

fn key_name(key: usize) -> String {
    format!("lin/k{key}")
}

/// What the clients need to reach the cluster.
#[derive(Clone)]
struct Endpoints {
    addrs: Vec<SocketAddr>,
    token: Option<String>,
}

/// How one request to one server ended.
enum Attempt {
    /// An answer that says what happened (200, or 404 for a read).
    Answer(HttpResponse),
    /// Certainly not applied: refused connection, "No cluster leader" (no leader to forward
    /// to, or refused before reaching the log), or 503 (refused before reaching the log).
    NotApplied,
    /// Anything else (timeout, reset, "leadership lost while committing log"): a write may
    /// still take effect.
    Unknown,
}

impl Endpoints {
    fn request(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
        timeout: Duration,
    ) -> std::io::Result<HttpResponse> {
        let headers: Vec<(&str, &str)> = self
            .token
            .as_deref()
            .map(|t| ("X-Consul-Token", t))
            .into_iter()
            .collect();
        try_request_bounded(addr, method, path, body, &headers, timeout)
    }

    fn attempt(&self, addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Attempt {
        match self.request(addr, method, path, body, ATTEMPT_TIMEOUT) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Attempt::NotApplied,
            Err(_) => Attempt::Unknown,
            Ok(r) if r.status == 500 && r.body.starts_with(b"No cluster leader") => {
                Attempt::NotApplied
            }
            Ok(r) if r.status == 503 => Attempt::NotApplied,
            Ok(r) if r.status == 200 || (r.status == 404 && method == "GET") => Attempt::Answer(r),
            Ok(_) => Attempt::Unknown,
        }
    }

    /// The server every answering server names as leader, when they agree and it serves a
    /// leader read.
    fn leader(&self) -> Option<usize> {
        let mut named: Option<String> = None;
        for addr in &self.addrs {
            let Ok(r) = self.request(*addr, "GET", "/v1/status/leader?stale", b"", PROBE_TIMEOUT)
            else {
                continue;
            };
            let text = r.text().trim().trim_matches('"').to_string();
            match &named {
                _ if text.is_empty() => return None,
                None => named = Some(text),
                Some(previous) if *previous == text => {}
                Some(_) => return None,
            }
        }
        let ip: std::net::IpAddr = named?.rsplit_once(':')?.0.parse().ok()?;
        let index = self.addrs.iter().position(|a| a.ip() == ip)?;
        let probe = self
            .request(
                self.addrs[index],
                "GET",
                "/v1/kv/__leader_probe",
                b"",
                PROBE_TIMEOUT,
            )
            .ok()?;
        (probe.status == 404).then_some(index)
    }

    /// A server other than `former` that names itself leader and serves a leader read.
    fn leader_other_than(&self, former: usize) -> Option<usize> {
        (0..self.addrs.len()).filter(|i| *i != former).find(|i| {
            let addr = self.addrs[*i];
            let named = self
                .request(addr, "GET", "/v1/status/leader", b"", PROBE_TIMEOUT)
                .ok()
                .map(|r| r.text().trim().trim_matches('"').to_string());
            let Some(ip) = named
                .as_deref()
                .and_then(|n| n.rsplit_once(':'))
                .and_then(|(ip, _)| ip.parse::<std::net::IpAddr>().ok())
            else {
                return false;
            };
            ip == addr.ip()
                && self
                    .request(addr, "GET", "/v1/kv/__leader_probe", b"", PROBE_TIMEOUT)
                    .is_ok_and(|probe| probe.status == 404)
        })
    }

    /// The Raft configuration with the highest index among the servers that answer:
    /// `(voters, servers)`.
    fn configuration(&self) -> Option<(usize, usize)> {
        let mut best: Option<(u64, usize, usize)> = None;
        for addr in &self.addrs {
            let Ok(r) = self.request(
                *addr,
                "GET",
                "/v1/operator/raft/configuration?stale",
                b"",
                PROBE_TIMEOUT,
            ) else {
                continue;
            };
            if r.status != 200 {
                continue;
            }
            let Ok(body) = serde_json::from_slice::<serde_json::Value>(&r.body) else {
                continue;
            };
            let index = body["Index"].as_u64().unwrap_or(0);
            let servers = body["Servers"].as_array().map_or(0, Vec::len);
            let voters = body["Servers"]
                .as_array()
                .map_or(0, |s| s.iter().filter(|s| s["Voter"] == true).count());
            if best.is_none_or(|(i, _, _)| index > i) {
                best = Some((index, voters, servers));
            }
        }
        best.map(|(_, voters, servers)| (voters, servers))
    }
}

/// What every client records, shared with the checker.
struct Records {
    histories: Vec<Mutex<Vec<Event>>>,
    /// `(ended, succeeded)` of every operation, for availability.
    operations: Mutex<Vec<(Duration, bool)>>,
    /// Inserted keys whose write was acknowledged.
    inserted: Mutex<Vec<String>>,
}

struct Client {
    id: usize,
    endpoints: Endpoints,
    /// Indexes into `endpoints.addrs`, the one in use first.
    order: Vec<usize>,
    /// The order this client rebalances to.
    own_order: Vec<usize>,
    rebalanced: Instant,
    started: Instant,
    records: Arc<Records>,
    rng: rand::rngs::StdRng,
    sequence: u64,
}

impl Client {
    fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn record(&self, key: usize, event: Event) {
        self.records.histories[key].lock().unwrap().push(event);
    }

    fn operation_ended(&self, succeeded: bool) {
        let ended = self.started.elapsed();
        self.records
            .operations
            .lock()
            .unwrap()
            .push((ended, succeeded));
    }

    /// Sends the request to the servers in this client's order until one answers. Each
    /// attempt that leaves the outcome unknown is passed to `unknown` with its invocation
    /// time.
    fn send(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        mut unknown: impl FnMut(&Client, u64),
    ) -> Option<(HttpResponse, u64)> {
        for _ in 0..self.order.len() {
            let addr = self.endpoints.addrs[self.order[0]];
            let invoked = self.now();
            match self.endpoints.attempt(addr, method, path, body) {
                Attempt::Answer(r) => return Some((r, invoked)),
                Attempt::NotApplied => {}
                Attempt::Unknown => unknown(self, invoked),
            }
            self.order.rotate_left(1);
        }
        None
    }

    /// A default-consistency read: `Some(value, ModifyIndex)` when answered.
    fn read(&mut self, key: usize) -> Option<(Option<Value>, u64, u64)> {
        let (r, invoked) =
            self.send("GET", &format!("/v1/kv/{}", key_name(key)), b"", |_, _| {})?;
        if r.status == 404 {
            return Some((None, 0, invoked));
        }
        let entries: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
        use base64::Engine;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(entries[0]["Value"].as_str()?)
            .ok()?;
        let value: Value = String::from_utf8(raw).ok()?.parse().ok()?;
        Some((Some(value), entries[0]["ModifyIndex"].as_u64()?, invoked))
    }

    fn read_op(&mut self, key: usize) {
        match self.read(key) {
            Some((value, _, invoked)) => {
                let completed = Some(self.now());
                self.record(
                    key,
                    Event {
                        client: self.id,
                        op: Op::Read,
                        outcome: Outcome::Read(value),
                        invoked,
                        completed,
                    },
                );
                self.operation_ended(true);
            }
            None => self.operation_ended(false),
        }
    }

    fn write_op(&mut self, key: usize) {
        self.sequence += 1;
        let value = ((self.id as u64) << 40) | self.sequence;
        let op = Op::Write(value);
        let path = format!("/v1/kv/{}", key_name(key));
        let answer = self.send("PUT", &path, value.to_string().as_bytes(), |c, invoked| {
            c.record(key, unknown_event(c.id, op, invoked));
        });
        match answer {
            Some((r, invoked)) if r.body.starts_with(b"true") => {
                let completed = Some(self.now());
                self.record(
                    key,
                    Event {
                        client: self.id,
                        op,
                        outcome: Outcome::Written,
                        invoked,
                        completed,
                    },
                );
                self.operation_ended(true);
            }
            Some((_, invoked)) => {
                self.record(key, unknown_event(self.id, op, invoked));
                self.operation_ended(false);
            }
            None => self.operation_ended(false),
        }
    }

    /// Reads the value and its index, then sets a new value if the index is unchanged.
    /// Values are unique, so "index unchanged" is "value unchanged" and the register model
    /// applies.
    fn cas_op(&mut self, key: usize) {
        let Some((expected, index, invoked)) = self.read(key) else {
            self.operation_ended(false);
            return;
        };
        let completed = Some(self.now());
        self.record(
            key,
            Event {
                client: self.id,
                op: Op::Read,
                outcome: Outcome::Read(expected),
                invoked,
                completed,
            },
        );
        self.sequence += 1;
        let new = ((self.id as u64) << 40) | self.sequence;
        let op = Op::Cas { expected, new };
        let path = format!("/v1/kv/{}?cas={index}", key_name(key));
        let answer = self.send("PUT", &path, new.to_string().as_bytes(), |c, invoked| {
            c.record(key, unknown_event(c.id, op, invoked));
        });
        let Some((r, invoked)) = answer else {
            self.operation_ended(false);
            return;
        };
        let outcome = if r.body.starts_with(b"true") {
            Outcome::Cas(true)
        } else if r.body.starts_with(b"false") {
            Outcome::Cas(false)
        } else {
            self.record(key, unknown_event(self.id, op, invoked));
            self.operation_ended(false);
            return;
        };
        let completed = Some(self.now());
        self.record(
            key,
            Event {
                client: self.id,
                op,
                outcome,
                invoked,
                completed,
            },
        );
        self.operation_ended(true);
    }

    /// Inserts a key of its own; an acknowledged insert must be there at the end.
    fn insert_op(&mut self) {
        self.sequence += 1;
        let key = format!("lin/set/c{}-{}", self.id, self.sequence);
        let answer = self.send("PUT", &format!("/v1/kv/{key}"), b"1", |_, _| {});
        let acknowledged = answer.is_some_and(|(r, _)| r.body.starts_with(b"true"));
        if acknowledged {
            self.records.inserted.lock().unwrap().push(key);
        }
        self.operation_ended(acknowledged);
    }

    fn run(mut self, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::SeqCst) {
            if self.rebalanced.elapsed() >= REBALANCE_INTERVAL {
                self.order.clone_from(&self.own_order);
                self.rebalanced = Instant::now();
            }
            let key = self.rng.random_range(0..KEYS);
            match self.rng.random_range(0..100) {
                0..40 => self.read_op(key),
                40..70 => self.write_op(key),
                70..90 => self.cas_op(key),
                _ => self.insert_op(),
            }
            std::thread::sleep(Duration::from_millis(self.rng.random_range(5..25)));
        }
    }
}

fn unknown_event(client: usize, op: Op, invoked: u64) -> Event {
    Event {
        client,
        op,
        outcome: Outcome::Unknown,
        invoked,
        completed: None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
    Kill,
    Pause,
    Partition,
}

#[derive(Debug, Clone)]
struct Fault {
    kind: FaultKind,
    target: usize,
    /// The target led when the fault began.
    leader: bool,
    /// Since the clients started.
    began: Duration,
    ended: Duration,
    /// For a fault of the leader: how long after it began another server served a leader
    /// read (`None`: none did before the fault ended).
    election: Option<Duration>,
}

/// The cluster under test and how to reach it.
struct Fleet {
    cluster: Cluster,
    endpoints: Endpoints,
    firewall: nemesis::Firewall,
    /// Certificates of the TLS run, removed with the fleet.
    _pki: Option<TempDir>,
    /// Each server's log of its lifetimes before the last restart (a restart starts a
    /// fresh log file), for `FAULTS_KEEP_LOGS`.
    earlier_logs: Vec<String>,
}

fn praetor_in(dir: &std::path::Path, args: &[&str]) {
    let output = std::process::Command::new(praetor_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run praetor");
    assert!(
        output.status.success(),
        "praetor {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Fleet {
    /// Starts `servers` servers, with mutual TLS on the server port and default-deny ACLs
    /// when `secure`, and waits until every one of them votes.
    fn start(servers: usize, secure: bool) -> Fleet {
        let (cluster, token, pki) = if secure {
            let pki = TempDir::new("faults-pki");
            praetor_in(pki.path(), &["tls", "ca", "create"]);
            praetor_in(pki.path(), &["tls", "cert", "create", "-server"]);
            let file = |name: &str| pki.path().join(name).display().to_string();
            let hcl = format!(
                "tls {{ defaults {{ ca_file = \"{}\" cert_file = \"{}\" key_file = \"{}\" }} \
                 internal_rpc {{ verify_incoming = true verify_outgoing = true verify_server_hostname = true }} }} \
                 acl {{ enabled = true default_policy = \"deny\" tokens {{ initial_management = \"{MANAGEMENT}\" agent = \"{MANAGEMENT}\" }} }}",
                file("consul-agent-ca.pem"),
                file("dc1-server-consul-0.pem"),
                file("dc1-server-consul-0-key.pem"),
            );
            let cluster = Cluster::spawn(servers, &["-hcl", &hcl]);
            (cluster, Some(MANAGEMENT.to_string()), Some(pki))
        } else {
            (Cluster::spawn(servers, &[]), None, None)
        };
        let endpoints = Endpoints {
            addrs: cluster.servers.iter().map(|s| s.addr()).collect(),
            token,
        };
        let ips: Vec<_> = cluster.servers.iter().map(|s| s.ip).collect();
        let fleet = Fleet {
            cluster,
            endpoints,
            firewall: nemesis::Firewall::new(&ips),
            _pki: pki,
            earlier_logs: vec![String::new(); servers],
        };
        fleet.wait_for_voters(Duration::from_secs(60));
        fleet
    }

    /// Waits until a leader serves and every server votes.
    fn wait_for_voters(&self, timeout: Duration) {
        let n = self.cluster.servers.len();
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            if self.endpoints.leader().is_some() {
                last = self.endpoints.configuration();
                if last == Some((n, n)) {
                    return;
                }
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .cluster
                    .servers
                    .iter()
                    .map(|s| format!("--- {}\n{}", s.ip, tail(&s.log(), 60)))
                    .collect();
                panic!(
                    "not every server votes within {timeout:?} (voters, servers: {last:?})\n{}",
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn inject(&mut self, kind: FaultKind, target: usize) {
        match kind {
            FaultKind::Kill => self.cluster.servers[target].kill9(),
            FaultKind::Pause => self.cluster.signal(target, libc::SIGSTOP),
            FaultKind::Partition => {
                let ips: Vec<_> = self.cluster.servers.iter().map(|s| s.ip).collect();
                self.firewall.isolate(ips[target], &ips);
            }
        }
    }

    fn repair(&mut self, kind: FaultKind, target: usize) {
        match kind {
            FaultKind::Kill => {
                let log = self.cluster.servers[target].log();
                self.earlier_logs[target].push_str(&log);
                self.cluster.servers[target].restart();
            }
            FaultKind::Pause => self.cluster.signal(target, libc::SIGCONT),
            FaultKind::Partition => self.firewall.heal(),
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One run's settings.
struct Scenario {
    servers: usize,
    secure: bool,
    seconds: u64,
    seed: u64,
}

impl Scenario {
    fn from_env(servers: usize, secure: bool) -> Scenario {
        let seconds = std::env::var("LINEARIZABILITY_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(40);
        let seed = std::env::var("LINEARIZABILITY_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random);
        Scenario {
            servers,
            secure,
            seconds,
            seed,
        }
    }

    fn name(&self) -> String {
        format!(
            "{} servers, {}",
            self.servers,
            if self.secure { "TLS + ACL" } else { "plain" }
        )
    }
}

/// A run of consecutive windows at 0% and what explains it.
#[derive(Debug)]
struct Outage {
    first_window: usize,
    windows: usize,
    /// The faults whose span (plus [`FAULT_AFTERMATH`]) overlaps the run.
    faults: Vec<Fault>,
}

impl Outage {
    fn explained_by_leader_fault(&self) -> bool {
        self.faults.iter().any(|f| f.leader)
    }
}

/// What a run measured.
struct Figures {
    operations: usize,
    acknowledged_writes: usize,
    unknown: usize,
    violations: Vec<String>,
    lost: Vec<String>,
    inserted: usize,
    voters_min: usize,
    /// Succeeded operations of all.
    availability: f64,
    /// The mean of the windows' availability.
    window_availability: f64,
    windows: Vec<f64>,
    outages: Vec<Outage>,
    faults: Vec<Fault>,
}

fn availability_windows(operations: &[(Duration, bool)], span: Duration) -> Vec<f64> {
    let count = (span.as_secs_f64() / WINDOW.as_secs_f64()).floor() as usize;
    let mut tally = vec![(0usize, 0usize); count];
    for (ended, succeeded) in operations {
        let window = (ended.as_secs_f64() / WINDOW.as_secs_f64()) as usize;
        if let Some((ok, all)) = tally.get_mut(window) {
            *all += 1;
            *ok += usize::from(*succeeded);
        }
    }
    tally
        .iter()
        .map(|(ok, all)| {
            if *all == 0 {
                0.0
            } else {
                *ok as f64 / *all as f64
            }
        })
        .collect()
}

fn outages(windows: &[f64], faults: &[Fault]) -> Vec<Outage> {
    let mut outages = Vec::new();
    let mut i = 0;
    while i < windows.len() {
        if windows[i] > 0.0 {
            i += 1;
            continue;
        }
        let first = i;
        while i < windows.len() && windows[i] == 0.0 {
            i += 1;
        }
        let begins = WINDOW * first as u32;
        let ends = WINDOW * i as u32;
        let overlapping = faults
            .iter()
            .filter(|f| f.began < ends && f.ended + FAULT_AFTERMATH > begins)
            .cloned()
            .collect();
        outages.push(Outage {
            first_window: first,
            windows: i - first,
            faults: overlapping,
        });
    }
    outages
}

fn run(scenario: &Scenario) -> Figures {
    let _one = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    println!(
        "faults: {} — {} s of faults, seed {} (replay: LINEARIZABILITY_SEED={})",
        scenario.name(),
        scenario.seconds,
        scenario.seed,
        scenario.seed
    );
    let mut fleet = Fleet::start(scenario.servers, scenario.secure);
    let n = scenario.servers;
    let majority = n / 2 + 1;
    let started = Instant::now();
    // The servers' logs carry UTC times: say when the run's clock started.
    if let Ok(clock) = std::process::Command::new("date")
        .args(["-u", "+%H:%M:%S.%3N"])
        .output()
    {
        println!(
            "faults: time 0 s is {} UTC",
            String::from_utf8_lossy(&clock.stdout).trim()
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let records = Arc::new(Records {
        histories: (0..KEYS).map(|_| Mutex::new(Vec::new())).collect(),
        operations: Mutex::new(Vec::new()),
        inserted: Mutex::new(Vec::new()),
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let mut order: Vec<usize> = (0..n).collect();
            order.rotate_left(id % n);
            let client = Client {
                id,
                endpoints: fleet.endpoints.clone(),
                own_order: order.clone(),
                order,
                rebalanced: Instant::now(),
                started,
                records: records.clone(),
                rng: rand::rngs::StdRng::seed_from_u64(
                    scenario.seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ),
                sequence: 0,
            };
            let stop = stop.clone();
            std::thread::spawn(move || client.run(stop))
        })
        .collect();
    let voter_samples: Arc<Mutex<Vec<(Duration, usize, usize)>>> = Arc::default();
    let monitor = {
        let (endpoints, stop, samples) =
            (fleet.endpoints.clone(), stop.clone(), voter_samples.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Some((voters, servers)) = endpoints.configuration() {
                    samples
                        .lock()
                        .unwrap()
                        .push((started.elapsed(), voters, servers));
                }
                std::thread::sleep(VOTER_SAMPLE_INTERVAL);
            }
        })
    };

    let mut rng = rand::rngs::StdRng::seed_from_u64(scenario.seed);
    let mut faults = Vec::new();
    let fault_phase = Duration::from_secs(scenario.seconds);
    while started.elapsed() < fault_phase {
        std::thread::sleep(Duration::from_millis(rng.random_range(GAP_MS)));
        let target = rng.random_range(0..n);
        let kind = match rng.random_range(0..3) {
            0 => FaultKind::Kill,
            1 => FaultKind::Pause,
            _ => FaultKind::Partition,
        };
        let duration = Duration::from_millis(rng.random_range(FAULT_MS));
        // Which server leads decides how a fault is judged: find out before injecting, so
        // a fault right after an election is not taken for a follower's by mistake.
        let looking = Instant::now();
        let mut known = fleet.endpoints.leader();
        while known.is_none() && looking.elapsed() < LEADER_KNOWN_WAIT {
            std::thread::sleep(ELECTION_POLL);
            known = fleet.endpoints.leader();
        }
        let leader = known == Some(target);
        let began = started.elapsed();
        fleet.inject(kind, target);
        let injected = Instant::now();
        // While the leader is down, watch for its successor: the election's cost.
        let mut election = None;
        while leader && election.is_none() && injected.elapsed() < duration {
            if fleet.endpoints.leader_other_than(target).is_some() {
                election = Some(started.elapsed() - began);
            } else {
                std::thread::sleep(ELECTION_POLL);
            }
        }
        std::thread::sleep(duration.saturating_sub(injected.elapsed()));
        fleet.repair(kind, target);
        let ended = started.elapsed();
        println!(
            "faults: {:>6.1} s {kind:?} of s{target}{} for {:.1} s{}",
            began.as_secs_f64(),
            if leader { " (leader)" } else { "" },
            duration.as_secs_f64(),
            match election {
                Some(e) => format!(", a new leader served after {:.2} s", e.as_secs_f64()),
                None if leader => ", no new leader before it ended".to_string(),
                None => String::new(),
            }
        );
        faults.push(Fault {
            kind,
            target,
            leader,
            began,
            ended,
            election,
        });
    }
    // Every server back and voting, then a few healthy seconds for the last operations.
    fleet.wait_for_voters(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let span = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().unwrap();
    }
    monitor.join().unwrap();

    // Every acknowledged insert is there, read from the leader.
    let leader = (0..50)
        .find_map(|_| {
            fleet.endpoints.leader().or_else(|| {
                std::thread::sleep(Duration::from_millis(200));
                None
            })
        })
        .expect("a leader at the end");
    let listing = fleet
        .endpoints
        .request(
            fleet.endpoints.addrs[leader],
            "GET",
            "/v1/kv/lin/set/?keys",
            b"",
            Duration::from_secs(10),
        )
        .expect("the inserted keys");
    let present: BTreeSet<String> = if listing.status == 404 {
        BTreeSet::new()
    } else {
        serde_json::from_slice(&listing.body).expect("a list of keys")
    };
    let inserted = records.inserted.lock().unwrap().clone();
    let lost: Vec<String> = inserted
        .iter()
        .filter(|k| !present.contains(*k))
        .cloned()
        .collect();

    let mut operations = 0;
    let mut unknown = 0;
    let mut acknowledged_writes = 0;
    let mut violations = Vec::new();
    for (key, history) in records.histories.iter().enumerate() {
        let history = history.lock().unwrap();
        operations += history.len();
        unknown += history
            .iter()
            .filter(|e| e.outcome == Outcome::Unknown)
            .count();
        acknowledged_writes += history
            .iter()
            .filter(|e| matches!(e.outcome, Outcome::Written | Outcome::Cas(true)))
            .count();
        if let Err(violation) = check(&history, None) {
            violations.push(format!(
                "key {key}: {violation} ({} operations on this key)",
                history.len()
            ));
        }
    }
    let samples = voter_samples.lock().unwrap();
    let voters_min = samples.iter().map(|(_, v, _)| *v).min().unwrap_or(0);
    if voters_min < majority {
        for (at, voters, servers) in samples.iter().filter(|(_, v, _)| *v < majority) {
            println!(
                "faults: at {:.1} s only {voters} of {servers} servers voted",
                at.as_secs_f64()
            );
        }
    }
    let all_operations = records.operations.lock().unwrap().clone();
    let windows = availability_windows(&all_operations, span);
    let succeeded = all_operations.iter().filter(|(_, ok)| *ok).count();
    let availability = succeeded as f64 / all_operations.len().max(1) as f64;
    let window_availability = windows.iter().sum::<f64>() / windows.len().max(1) as f64;
    let outages = outages(&windows, &faults);
    let figures = Figures {
        operations,
        acknowledged_writes,
        unknown,
        violations,
        lost,
        inserted: inserted.len(),
        voters_min,
        availability,
        window_availability,
        windows,
        outages,
        faults,
    };
    report(scenario, &figures);
    if let Some(dir) = std::env::var("FAULTS_KEEP_LOGS")
        .ok()
        .filter(|d| !d.is_empty())
    {
        std::fs::create_dir_all(&dir).unwrap();
        for (i, server) in fleet.cluster.servers.iter().enumerate() {
            let log = format!("{}{}", fleet.earlier_logs[i], server.log());
            std::fs::write(format!("{dir}/s{i}.log"), log).unwrap();
        }
        println!("faults: server logs kept in {dir}");
    }
    figures
}

/// The mean availability of the windows a follower's fault overlaps and no fault of the
/// leader (or its aftermath) does: what followers' faults cost. `None` without such windows.
fn follower_fault_windows(windows: &[f64], faults: &[Fault]) -> Option<f64> {
    let overlaps = |f: &Fault, i: usize, aftermath: Duration| {
        f.began < WINDOW * (i as u32 + 1) && f.ended + aftermath > WINDOW * i as u32
    };
    let chosen: Vec<f64> = (0..windows.len())
        .filter(|i| {
            faults
                .iter()
                .any(|f| !f.leader && overlaps(f, *i, Duration::ZERO))
                && !faults
                    .iter()
                    .any(|f| f.leader && overlaps(f, *i, FAULT_AFTERMATH))
        })
        .map(|i| windows[i])
        .collect();
    (!chosen.is_empty()).then(|| chosen.iter().sum::<f64>() / chosen.len() as f64)
}

fn report(scenario: &Scenario, f: &Figures) {
    let zero = f.windows.iter().filter(|w| **w == 0.0).count();
    let longest = f.outages.iter().map(|o| o.windows).max().unwrap_or(0);
    let leader_faults = f.faults.iter().filter(|x| x.leader).count();
    let elections: Vec<(String, f64)> = f
        .faults
        .iter()
        .filter_map(|x| Some((format!("{:?}", x.kind), x.election?.as_secs_f64())))
        .collect();
    let election_max = elections.iter().map(|(_, s)| *s).fold(0.0, f64::max);
    let follower_cost = follower_fault_windows(&f.windows, &f.faults);
    println!(
        "faults: {} | {} s | {} faults ({} of the leader) | {} operations, {} acknowledged writes, {} unknown | {} violations | {} of {} inserts lost | voters min {} of {} | availability {:.1}% of operations, {:.1}% of windows | {} windows at 0%, longest run {} s",
        scenario.name(),
        f.windows.len(),
        f.faults.len(),
        leader_faults,
        f.operations,
        f.acknowledged_writes,
        f.unknown,
        f.violations.len(),
        f.lost.len(),
        f.inserted,
        f.voters_min,
        scenario.servers,
        f.availability * 100.0,
        f.window_availability * 100.0,
        zero,
        longest,
    );
    let percents: Vec<String> = f
        .windows
        .iter()
        .map(|w| format!("{:.0}", w * 100.0))
        .collect();
    println!("faults: windows (%): {}", percents.join(" "));
    let listed: Vec<String> = elections
        .iter()
        .map(|(kind, seconds)| format!("{kind} {seconds:.2} s"))
        .collect();
    println!(
        "faults: leader faults, time to a new serving leader: {} | windows during followers' faults only: {}",
        if listed.is_empty() { "none".to_string() } else { listed.join(", ") },
        follower_cost.map_or("none".to_string(), |a| format!("{:.1}% available", a * 100.0)),
    );
    for outage in &f.outages {
        let causes: Vec<String> = outage
            .faults
            .iter()
            .map(|x| {
                format!(
                    "{:?} of s{}{} at {:.1} s",
                    x.kind,
                    x.target,
                    if x.leader { " (leader)" } else { "" },
                    x.began.as_secs_f64()
                )
            })
            .collect();
        println!(
            "faults: 0% from {} s for {} s: {}",
            outage.first_window,
            outage.windows,
            if causes.is_empty() {
                "no fault".to_string()
            } else {
                causes.join(", ")
            }
        );
    }
    if let Some(path) = std::env::var("FAULTS_FIGURES")
        .ok()
        .filter(|p| !p.is_empty())
    {
        let kinds: BTreeMap<String, usize> = f.faults.iter().fold(BTreeMap::new(), |mut m, x| {
            *m.entry(format!("{:?}", x.kind)).or_default() += 1;
            m
        });
        let line = serde_json::json!({
            "scenario": scenario.name(),
            "servers": scenario.servers,
            "secure": scenario.secure,
            "seed": scenario.seed,
            "seconds": f.windows.len(),
            "faults": f.faults.len(),
            "leader_faults": leader_faults,
            "fault_kinds": kinds,
            "operations": f.operations,
            "acknowledged_writes": f.acknowledged_writes,
            "unknown": f.unknown,
            "violations": f.violations.len(),
            "inserts": f.inserted,
            "lost": f.lost.len(),
            "voters_min": f.voters_min,
            "availability": f.availability,
            "window_availability": f.window_availability,
            "zero_windows": zero,
            "zero_windows_by_follower_faults": f.outages.iter().filter(|o| !o.explained_by_leader_fault()).map(|o| o.windows).sum::<usize>(),
            "longest_outage_s": longest,
            "elections": elections,
            "election_max_s": election_max,
            "follower_fault_window_availability": follower_cost,
        });
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("the figures file");
        writeln!(file, "{line}").unwrap();
    }
}

/// The properties issue #37 asks of every run.
fn assert_reliable(scenario: &Scenario, f: &Figures) {
    let replay = format!("replay: LINEARIZABILITY_SEED={}", scenario.seed);
    assert!(
        f.violations.is_empty(),
        "{}: {} ({replay})",
        scenario.name(),
        f.violations.join("; ")
    );
    assert!(
        f.lost.is_empty(),
        "{}: acknowledged inserts lost: {:?} ({replay})",
        scenario.name(),
        f.lost
    );
    let majority = scenario.servers / 2 + 1;
    assert!(
        f.voters_min >= majority,
        "{}: only {} voters at some point, fewer than {majority} ({replay})",
        scenario.name(),
        f.voters_min
    );
    for outage in &f.outages {
        assert!(
            outage.explained_by_leader_fault(),
            "{}: {} s at 0% from {} s, and no fault of the leader explains it: {:?} ({replay})",
            scenario.name(),
            outage.windows,
            outage.first_window,
            outage.faults
        );
        assert!(
            outage.windows <= LEADER_OUTAGE_MAX_WINDOWS,
            "{}: a leader's fault cost {} s at 0% from {} s, more than one election ({replay})",
            scenario.name(),
            outage.windows,
            outage.first_window
        );
    }
    assert!(
        f.acknowledged_writes > 20,
        "too few acknowledged writes ({}) for the check to mean much",
        f.acknowledged_writes
    );
    assert!(f.faults.len() >= 3, "the nemesis must act several times");
}

#[test]
fn three_servers_stay_linearizable_and_available_under_kills_pauses_and_partitions() {
    let scenario = Scenario::from_env(3, false);
    let figures = run(&scenario);
    assert_reliable(&scenario, &figures);
}

#[test]
fn three_servers_with_tls_and_acls_stay_linearizable_and_available_under_faults() {
    let scenario = Scenario::from_env(3, true);
    let figures = run(&scenario);
    assert_reliable(&scenario, &figures);
}

/// The soak's variants (`tests/soak/faults.sh`): `FAULTS_SERVERS` servers, plain and TLS +
/// ACL by `FAULTS_SECURE`.
#[test]
#[ignore = "the soak script runs it"]
fn soak() {
    let servers = std::env::var("FAULTS_SERVERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let secure = std::env::var("FAULTS_SECURE").is_ok_and(|s| s == "1");
    let scenario = Scenario::from_env(servers, secure);
    let figures = run(&scenario);
    assert_reliable(&scenario, &figures);
}
