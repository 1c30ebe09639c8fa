//! The command line: `loadgen <scenario> --target URL [flags]`, `loadgen compare …`,
//! `loadgen chart …`, `loadgen fanout-floor …`, parsed into the configurations of
//! `config.rs`.
//!
//! The parser is hand-written around one table of flags ([`RUN_FLAGS`]) so that the help text,
//! the single-run parser and the per-side overrides of `compare` (`--<flag>-a`, `--<flag>-b`)
//! can never disagree. Every numeric flag is range-checked here with its limit named; a bad
//! command line is a clear message, never a panic. Counts accept `k`/`m` suffixes (`15k`),
//! durations accept Go-style units (`500ms`, `10s`, `1m30s`; a bare number is seconds).

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::config::*;
use crate::dnswire::QueryType;
use crate::floor::{FloorKind, ServeFloorConfig};

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Run(Box<RunConfig>),
    Compare(Box<CompareConfig>),
    Chart(ChartConfig),
    FanoutFloor(FloorConfig),
    /// The HTTP or DNS floor server.
    Floor(ServeFloorConfig),
    /// `loadgen tcp-echo --listen IP:PORT`: the echo server of the TCP scenarios.
    TcpEcho(std::net::SocketAddr),
    Help(String),
}

/// One entry of the flag table.
struct FlagSpec {
    name: &'static str,
    /// Placeholder for the value in help; `None` for a switch that takes no value.
    value: Option<&'static str>,
    help: &'static str,
    apply: fn(&mut RunConfig, &str) -> Result<(), String>,
}

macro_rules! flag {
    ($name:literal, $value:expr, $help:literal, $apply:expr) => {
        FlagSpec {
            name: $name,
            value: $value,
            help: $help,
            apply: $apply,
        }
    };
}

/// Every flag a run accepts, in help order.
const RUN_FLAGS: &[FlagSpec] = &[
    flag!(
        "target",
        Some("URL"),
        "http://ip:port (HTTP scenarios) or ip:port (dns)",
        |c, v| {
            c.target = Some(v.to_string());
            Ok(())
        }
    ),
    flag!(
        "etcd",
        None,
        "drive etcd's v3 JSON gateway instead of Consul's API (kv-*)",
        |c, _| {
            c.etcd = true;
            Ok(())
        }
    ),
    flag!(
        "connections",
        Some("N"),
        "concurrent connections / UDP sockets [64]",
        |c, v| {
            c.connections = parse_count(v, 1, CONNECTIONS_MAX)?;
            Ok(())
        }
    ),
    flag!("duration", Some("D"), "measured time [10s]", |c, v| {
        c.duration = parse_duration(v)?;
        Ok(())
    }),
    flag!(
        "warmup",
        Some("D"),
        "load before measuring starts, not recorded [0s]",
        |c, v| {
            c.warmup = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "rate",
        Some("R"),
        "open loop: R requests/s in total on a fixed schedule",
        |c, v| {
            let rate = parse_float(v)?;
            if !(rate > 0.0 && rate <= 1e9) {
                return Err(format!("--rate must be in (0, 1e9], got {v}"));
            }
            c.rate = Some(rate);
            Ok(())
        }
    ),
    flag!(
        "threads",
        Some("T"),
        "worker threads, one runtime each [cores]",
        |c, v| {
            c.threads = parse_count(v, 1, THREADS_MAX)?;
            Ok(())
        }
    ),
    flag!(
        "token",
        Some("T"),
        "ACL token the kv scenarios send (X-Consul-Token); repeatable, by connection",
        |c, v| {
            c.tokens.push(v.to_string());
            Ok(())
        }
    ),
    flag!(
        "tokens-rotate",
        None,
        "each request takes its connection's next token (connection i of C: tokens i, i+C, …), so all are used",
        |c, _| {
            c.tokens_rotate = true;
            Ok(())
        }
    ),
    flag!(
        "tokens-file",
        Some("FILE"),
        "ACL tokens, one a line, spread over the connections (kv scenarios)",
        |c, v| {
            let text = std::fs::read_to_string(v).map_err(|e| format!("{v}: {e}"))?;
            let before = c.tokens.len();
            c.tokens.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from),
            );
            if c.tokens.len() == before {
                return Err(format!("{v}: no token in the file"));
            }
            if c.tokens.len() > TOKENS_MAX {
                return Err(format!("more than {TOKENS_MAX} tokens"));
            }
            Ok(())
        }
    ),
    flag!("pin", None, "pin worker threads to cores", |c, _| {
        c.pin_threads = true;
        Ok(())
    }),
    flag!(
        "io",
        Some("auto|uring|epoll"),
        "I/O driver [auto]",
        |c, v| {
            c.io_driver = parse_choice(
                "io",
                v,
                &[
                    ("auto", IoDriver::Auto),
                    ("uring", IoDriver::Uring),
                    ("epoll", IoDriver::Epoll),
                ],
            )?;
            Ok(())
        }
    ),
    flag!(
        "sched",
        Some("normal|batch"),
        "scheduling policy of loadgen's threads; batch keeps them from preempting a \
         server on the same cores at every wake-up [normal]",
        |c, v| {
            c.sched_policy = parse_choice(
                "sched",
                v,
                &[
                    ("normal", SchedPolicy::Normal),
                    ("batch", SchedPolicy::Batch),
                ],
            )?;
            Ok(())
        }
    ),
    flag!(
        "json",
        None,
        "print one JSON object instead of the table",
        |c, _| {
            c.json = true;
            Ok(())
        }
    ),
    flag!(
        "json-out",
        Some("FILE"),
        "also write the JSON object to FILE",
        |c, v| {
            c.json_out = Some(v.to_string());
            Ok(())
        }
    ),
    flag!("no-progress", None, "no progress line on stderr", |c, _| {
        c.progress = false;
        Ok(())
    }),
    flag!(
        "label",
        Some("TEXT"),
        "name printed with the results",
        |c, v| {
            c.label = Some(v.to_string());
            Ok(())
        }
    ),
    flag!(
        "timeout",
        Some("D"),
        "bound on one request, send to full answer [5s]",
        |c, v| {
            c.timeout = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "connect-timeout",
        Some("D"),
        "bound on one TCP connect [5s]",
        |c, v| {
            c.connect_timeout = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "key",
        Some("KEY"),
        "KV key (or prefix with --watch prefix) [loadgen/key]",
        |c, v| {
            c.key = v.to_string();
            Ok(())
        }
    ),
    flag!(
        "keys",
        Some("N"),
        "spread over N keys <key>-0 … <key>-(N-1) [1]",
        |c, v| {
            c.keys = parse_count(v, 1, KEYS_MAX)?;
            Ok(())
        }
    ),
    flag!(
        "value-bytes",
        Some("N"),
        "bytes per written value [64]",
        |c, v| {
            c.value_bytes = parse_count(v, 0, VALUE_BYTES_MAX)?;
            Ok(())
        }
    ),
    flag!(
        "read-ratio",
        Some("F"),
        "kv-mixed: fraction of GETs, 0..1 [0.9]",
        |c, v| {
            let ratio = parse_float(v)?;
            if !(0.0..=1.0).contains(&ratio) {
                return Err(format!("--read-ratio must be within 0..1, got {v}"));
            }
            c.read_ratio = ratio;
            Ok(())
        }
    ),
    flag!(
        "consistency",
        Some("default|stale|consistent"),
        "read mode (etcd: stale = serializable)",
        |c, v| {
            c.consistency = match v {
                "default" => Consistency::Default,
                "stale" => Consistency::Stale,
                "consistent" => Consistency::Consistent,
                _ => {
                    return Err(format!(
                        "--consistency takes default, stale or consistent, not {v:?}"
                    ))
                }
            };
            Ok(())
        }
    ),
    flag!(
        "datacenter",
        Some("DC"),
        "kv-get/put/mixed: add ?dc=DC (Consul forwards the request to that datacenter)",
        |c, v| {
            if v.is_empty()
                || !v
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(format!("--datacenter takes a datacenter name, not {v:?}"));
            }
            c.datacenter = Some(v.to_string());
            Ok(())
        }
    ),
    flag!(
        "no-preload",
        None,
        "kv-get/mixed: do not write the keys before reading",
        |c, _| {
            c.preload = false;
            Ok(())
        }
    ),
    flag!(
        "watchers",
        Some("N"),
        "blocking-fanout: parked queries [1000]",
        |c, v| {
            c.watchers = parse_count(v, 1, CONNECTIONS_MAX)?;
            Ok(())
        }
    ),
    flag!(
        "watch",
        Some("key|prefix|health"),
        "blocking-fanout: what the watchers block on [key]",
        |c, v| {
            c.watch = parse_choice(
                "watch",
                v,
                &[
                    ("key", WatchKind::Key),
                    ("prefix", WatchKind::Prefix),
                    ("health", WatchKind::Health),
                ],
            )?;
            Ok(())
        }
    ),
    flag!(
        "others",
        Some("N"),
        "blocking-fanout: also park N on --other-key/--other-service; none may wake [0]",
        |c, v| {
            c.others = parse_count(v, 0, CONNECTIONS_MAX)?;
            Ok(())
        }
    ),
    flag!(
        "other-key",
        Some("KEY"),
        "key the --others watch [loadgen/other]",
        |c, v| {
            c.other_key = v.to_string();
            Ok(())
        }
    ),
    flag!(
        "other-service",
        Some("SVC"),
        "service the --others watch [api]",
        |c, v| {
            c.other_service = v.to_string();
            Ok(())
        }
    ),
    flag!(
        "settle",
        Some("D"),
        "blocking-fanout: wait after all are parked, before the write [2s]",
        |c, v| {
            c.settle = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "wake-timeout",
        Some("D"),
        "blocking-fanout: bound on waiting for wake-ups after the write [10s]",
        |c, v| {
            c.wake_timeout = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "others-grace",
        Some("D"),
        "blocking-fanout: time --others are watched after the wake-ups [1s]",
        |c, v| {
            c.others_grace = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "wait",
        Some("D"),
        "blocking-fanout: ?wait= of the parked queries [300s]",
        |c, v| {
            c.wait = parse_duration(v)?;
            Ok(())
        }
    ),
    flag!(
        "write-method",
        Some("METHOD"),
        "blocking-fanout: method of the one write [PUT]",
        |c, v| {
            c.write_method = Some(v.to_ascii_uppercase());
            Ok(())
        }
    ),
    flag!(
        "write-path",
        Some("PATH"),
        "blocking-fanout: path of the one write [per --watch]",
        |c, v| {
            if !v.starts_with('/') {
                return Err(format!("--write-path must start with '/', got {v:?}"));
            }
            c.write_path = Some(v.to_string());
            Ok(())
        }
    ),
    flag!(
        "write-body",
        Some("TEXT"),
        "blocking-fanout: body of the one write",
        |c, v| {
            c.write_body = Some(v.to_string());
            Ok(())
        }
    ),
    flag!(
        "check-id",
        Some("ID"),
        "blocking-fanout --watch health: the write is PUT /v1/agent/check/fail/<ID>",
        |c, v| {
            c.check_id = Some(v.to_string());
            Ok(())
        }
    ),
    flag!(
        "rss-pid",
        Some("PID"),
        "report VmRSS growth of PID (per parked watcher / registered instance)",
        |c, v| {
            c.rss_pid = Some(parse_count(v, 1, u32::MAX as usize)? as u32);
            Ok(())
        }
    ),
    flag!(
        "source-addrs",
        Some("A-B|A,B,…"),
        "local IPv4 addresses to spread connections over",
        |c, v| {
            c.source_addrs = parse_source_addrs(v)?;
            Ok(())
        }
    ),
    flag!("service", Some("SVC"), "service name [web]", |c, v| {
        c.service = v.to_string();
        Ok(())
    }),
    flag!(
        "instances",
        Some("N"),
        "register N instances of --service before the run [0]",
        |c, v| {
            c.instances = parse_count(v, 0, INSTANCES_MAX)?;
            Ok(())
        }
    ),
    flag!(
        "via",
        Some("catalog|agent"),
        "registration endpoint family [catalog]",
        |c, v| {
            c.via = parse_choice(
                "via",
                v,
                &[
                    ("catalog", RegisterVia::Catalog),
                    ("agent", RegisterVia::Agent),
                ],
            )?;
            Ok(())
        }
    ),
    flag!(
        "per-node",
        Some("N"),
        "catalog registrations: N instances per node [1]",
        |c, v| {
            c.per_node = parse_count(v, 1, INSTANCES_MAX)?;
            Ok(())
        }
    ),
    flag!(
        "passing",
        None,
        "add ?passing to health queries (health-query default)",
        |c, _| {
            c.passing = Some(true);
            Ok(())
        }
    ),
    flag!(
        "pretty",
        None,
        "add pretty to health queries (indented JSON)",
        |c, _| {
            c.pretty = true;
            Ok(())
        }
    ),
    flag!(
        "no-passing",
        None,
        "no ?passing on health queries (blocking-fanout default)",
        |c, _| {
            c.passing = Some(false);
            Ok(())
        }
    ),
    flag!(
        "qname",
        Some("NAME"),
        "dns: query name [<service>.service.consul]",
        |c, v| {
            c.qname = Some(v.to_string());
            Ok(())
        }
    ),
    flag!(
        "qtype",
        Some("A|AAAA|SRV|ANY|SOA|NS|TXT|PTR"),
        "dns: query type [A]",
        |c, v| {
            c.qtype = QueryType::parse(v).ok_or_else(|| format!("unknown --qtype {v:?}"))?;
            Ok(())
        }
    ),
    flag!(
        "tcp",
        None,
        "dns: over TCP (length-prefixed) instead of UDP",
        |c, _| {
            c.tcp = true;
            Ok(())
        }
    ),
    flag!(
        "edns",
        Some("BYTES"),
        "dns: add EDNS0 OPT advertising BYTES of UDP payload",
        |c, v| {
            c.edns = Some(parse_count(v, 512, 65_535)? as u16);
            Ok(())
        }
    ),
    flag!(
        "allow-empty",
        None,
        "dns: an answer with no records is not an error",
        |c, _| {
            c.allow_empty = true;
            Ok(())
        }
    ),
    flag!(
        "lock-key",
        Some("KEY"),
        "session-locks: key prefix, a fresh lock key per connection [loadgen/lock]",
        |c, v| {
            c.lock_key = v.to_string();
            Ok(())
        }
    ),
    flag!(
        "txn-ops",
        Some("N"),
        "txn: KV sets per transaction, keys <key>-<conn>-<i> [64]",
        |c, v| {
            c.txn_ops = parse_count(v, 1, TXN_OPS_MAX)?;
            Ok(())
        }
    ),
];

fn find_flag(name: &str) -> Option<&'static FlagSpec> {
    RUN_FLAGS.iter().find(|f| f.name == name)
}

/// A `--name[=value]` token split into its name and inline value.
fn split_flag(token: &str) -> Option<(&str, Option<&str>)> {
    let body = token.strip_prefix("--")?;
    if body.is_empty() {
        return None;
    }
    Some(match body.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (body, None),
    })
}

/// Takes the value of a flag: inline (`--x=v`) or the next token.
fn take_value<'a>(
    name: &str,
    inline: Option<&'a str>,
    rest: &mut std::slice::Iter<'a, String>,
) -> Result<&'a str, String> {
    if let Some(v) = inline {
        return Ok(v);
    }
    rest.next()
        .map(String::as_str)
        .ok_or_else(|| format!("--{name} needs a value"))
}

fn apply_flag(config: &mut RunConfig, spec: &FlagSpec, value: &str) -> Result<(), String> {
    (spec.apply)(config, value).map_err(|e| format!("--{}: {e}", spec.name))
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let Some(first) = args.first() else {
        return Ok(Command::Help(String::new()));
    };
    match first.as_str() {
        "-h" | "--help" | "help" => Ok(Command::Help(args.get(1).cloned().unwrap_or_default())),
        "compare" => parse_compare(&args[1..]).map(|c| Command::Compare(Box::new(c))),
        "chart" => parse_chart(&args[1..]).map(Command::Chart),
        "fanout-floor" => parse_floor(&args[1..]).map(Command::FanoutFloor),
        "floor" => parse_serve_floor(&args[1..]).map(Command::Floor),
        "tcp-echo" => match &args[1..] {
            [flag, addr] if flag == "--listen" => addr
                .parse()
                .map(Command::TcpEcho)
                .map_err(|e| format!("--listen {addr}: {e}")),
            _ => Err("usage: loadgen tcp-echo --listen IP:PORT".to_string()),
        },
        other => {
            let scenario = Scenario::parse(other)
                .ok_or_else(|| format!("unknown command {other:?}; try `loadgen --help`"))?;
            if args[1..].iter().any(|a| a == "--help" || a == "-h") {
                return Ok(Command::Help(other.to_string()));
            }
            let mut config = RunConfig::new(scenario);
            let mut rest = args[1..].iter();
            while let Some(token) = rest.next() {
                let (name, inline) =
                    split_flag(token).ok_or_else(|| format!("unexpected argument {token:?}"))?;
                let spec = find_flag(name).ok_or_else(|| format!("unknown flag --{name}"))?;
                let value = match spec.value {
                    Some(_) => take_value(name, inline, &mut rest)?,
                    None if inline.is_some() => return Err(format!("--{name} takes no value")),
                    None => "",
                };
                apply_flag(&mut config, spec, value)?;
            }
            config.validate()?;
            Ok(Command::Run(Box::new(config)))
        }
    }
}

/// `loadgen floor http|dns --listen IP:PORT [--threads N] [--duration D]`.
fn parse_serve_floor(args: &[String]) -> Result<ServeFloorConfig, String> {
    let kind = match args.first().map(String::as_str) {
        Some("http") => FloorKind::Http,
        Some("dns") => FloorKind::Dns,
        _ => {
            return Err(
                "usage: loadgen floor http|dns --listen IP:PORT [--threads N] [--duration D]"
                    .to_string(),
            )
        }
    };
    let mut config = ServeFloorConfig {
        kind,
        listen: "127.0.0.1:18500".parse().expect("valid address"),
        threads: 2,
        duration: Duration::from_secs(3600),
    };
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => {
                config.listen = value
                    .parse()
                    .map_err(|e| format!("--listen {value:?}: {e}"))?
            }
            "--threads" => config.threads = parse_count(value, 1, 64)?,
            "--duration" => config.duration = parse_duration(value)?,
            other => return Err(format!("unknown floor flag {other}")),
        }
    }
    Ok(config)
}

/// `loadgen fanout-floor --listen IP:PORT [--threads N] [--duration D] [--answer-file F]
/// [--pretty-answer-file F]`.
fn parse_floor(args: &[String]) -> Result<FloorConfig, String> {
    let mut config = FloorConfig {
        listen: "127.0.0.1:18590".parse().expect("valid address"),
        threads: 2,
        duration: Duration::from_secs(600),
        answer_file: None,
        pretty_answer_file: None,
    };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => {
                config.listen = value
                    .parse()
                    .map_err(|e| format!("--listen {value:?}: {e}"))?
            }
            "--threads" => config.threads = parse_count(value, 1, 64)?,
            "--duration" => config.duration = parse_duration(value)?,
            "--answer-file" => config.answer_file = Some(value.clone()),
            "--pretty-answer-file" => config.pretty_answer_file = Some(value.clone()),
            other => return Err(format!("unknown fanout-floor flag {other}")),
        }
    }
    Ok(config)
}

/// Which side(s) of a comparison a flag applies to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Both,
    A,
    B,
}

fn parse_compare(args: &[String]) -> Result<CompareConfig, String> {
    let mut scenario: Option<Scenario> = None;
    let mut scenario_a: Option<Scenario> = None;
    let mut scenario_b: Option<Scenario> = None;
    let mut runs = 5usize;
    let mut pause = Duration::from_secs(1);
    let mut metric = "throughput_rps".to_string();
    let mut name_a = None;
    let mut name_b = None;
    let mut json = false;
    let mut json_out = None;
    // (side, flag, value) in command-line order, applied after the scenarios are known.
    let mut deferred: Vec<(Side, &'static FlagSpec, String)> = Vec::new();

    let mut rest = args.iter();
    while let Some(token) = rest.next() {
        let Some((name, inline)) = split_flag(token) else {
            if scenario.is_some() {
                return Err(format!("unexpected argument {token:?}"));
            }
            scenario =
                Some(Scenario::parse(token).ok_or_else(|| format!("unknown scenario {token:?}"))?);
            continue;
        };
        match name {
            "runs" => {
                runs = parse_count(take_value(name, inline, &mut rest)?, 1, COMPARE_RUNS_MAX)?
            }
            "pause" => pause = parse_duration(take_value(name, inline, &mut rest)?)?,
            "metric" => metric = take_value(name, inline, &mut rest)?.to_string(),
            "name-a" => name_a = Some(take_value(name, inline, &mut rest)?.to_string()),
            "name-b" => name_b = Some(take_value(name, inline, &mut rest)?.to_string()),
            "json" => json = true,
            "json-out" => json_out = Some(take_value(name, inline, &mut rest)?.to_string()),
            "scenario-a" | "scenario-b" => {
                let v = take_value(name, inline, &mut rest)?;
                let s = Scenario::parse(v).ok_or_else(|| format!("unknown scenario {v:?}"))?;
                if name == "scenario-a" {
                    scenario_a = Some(s);
                } else {
                    scenario_b = Some(s);
                }
            }
            "etcd-a" | "etcd-b" => {
                let side = if name == "etcd-a" { Side::A } else { Side::B };
                let url = take_value(name, inline, &mut rest)?.to_string();
                let target = find_flag("target").expect("target is in the flag table");
                let etcd = find_flag("etcd").expect("etcd is in the flag table");
                deferred.push((side, target, url));
                deferred.push((side, etcd, String::new()));
            }
            _ => {
                let (base, side) = if let Some(base) = name.strip_suffix("-a") {
                    (base, Side::A)
                } else if let Some(base) = name.strip_suffix("-b") {
                    (base, Side::B)
                } else {
                    (name, Side::Both)
                };
                // A flag whose own name ends in -a/-b would be ambiguous; none does today,
                // and the exact name wins if one is ever added.
                let (spec, side) = match find_flag(name) {
                    Some(spec) => (spec, Side::Both),
                    None => (
                        find_flag(base).ok_or_else(|| format!("unknown flag --{name}"))?,
                        side,
                    ),
                };
                let value = match spec.value {
                    Some(_) => take_value(name, inline, &mut rest)?.to_string(),
                    None if inline.is_some() => return Err(format!("--{name} takes no value")),
                    None => String::new(),
                };
                deferred.push((side, spec, value));
            }
        }
    }
    let scenario_for = |side_specific: Option<Scenario>, side: &str| {
        side_specific
            .or(scenario)
            .ok_or_else(|| format!("compare needs a scenario (positional, or --scenario-{side})"))
    };
    let mut a = RunConfig::new(scenario_for(scenario_a, "a")?);
    let mut b = RunConfig::new(scenario_for(scenario_b, "b")?);
    for (side, spec, value) in &deferred {
        if *side != Side::B {
            apply_flag(&mut a, spec, value)?;
        }
        if *side != Side::A {
            apply_flag(&mut b, spec, value)?;
        }
    }
    // The comparison prints; the sides themselves stay quiet on stdout.
    a.json = false;
    b.json = false;
    a.json_out = None;
    b.json_out = None;
    a.validate().map_err(|e| format!("side A: {e}"))?;
    b.validate().map_err(|e| format!("side B: {e}"))?;
    let default_name = |c: &RunConfig| {
        let target = c.target.clone().unwrap_or_default();
        if c.etcd {
            format!("etcd {target}")
        } else {
            target
        }
    };
    Ok(CompareConfig {
        name_a: name_a.unwrap_or_else(|| default_name(&a)),
        name_b: name_b.unwrap_or_else(|| default_name(&b)),
        a,
        b,
        runs,
        pause,
        metric,
        json,
        json_out,
    })
}

fn parse_chart(args: &[String]) -> Result<ChartConfig, String> {
    let mut input = None;
    let mut output = None;
    let mut title = None;
    let mut rest = args.iter();
    while let Some(token) = rest.next() {
        let (name, inline) =
            split_flag(token).ok_or_else(|| format!("unexpected argument {token:?}"))?;
        let value = take_value(name, inline, &mut rest)?.to_string();
        match name {
            "input" => input = Some(value),
            "output" => output = Some(value),
            "title" => title = Some(value),
            _ => return Err(format!("unknown chart flag --{name}")),
        }
    }
    Ok(ChartConfig {
        input: input.ok_or("chart needs --input FILE.json")?,
        output: output.ok_or("chart needs --output FILE.png")?,
        title,
    })
}

/// A count with an optional `k` (×1,000) or `m` (×1,000,000) suffix, within `[min, max]`.
/// The value named `text` among `choices`, or an error naming them all:
/// "--io takes auto, uring or epoll, not \"x\"".
fn parse_choice<T: Copy>(flag: &str, text: &str, choices: &[(&str, T)]) -> Result<T, String> {
    if let Some((_, value)) = choices.iter().find(|(name, _)| *name == text) {
        return Ok(*value);
    }
    let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
    let listed = match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    Err(format!("--{flag} takes {listed}, not {text:?}"))
}

pub fn parse_count(text: &str, min: usize, max: usize) -> Result<usize, String> {
    let t = text.trim();
    let (digits, scale) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1_000),
        Some((i, 'm' | 'M')) => (&t[..i], 1_000_000),
        _ => (t, 1),
    };
    let n: usize = digits
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{text:?} is not a count"))?;
    let n = n
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if n < min || n > max {
        return Err(format!("{text} is outside {min}..={max}"));
    }
    Ok(n)
}

/// A float with an optional `k`/`m` suffix (`50k` = 50,000).
pub fn parse_float(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (digits, scale) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'm' | 'M')) => (&t[..i], 1e6),
        _ => (t, 1.0),
    };
    let v: f64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !v.is_finite() {
        return Err(format!("{text:?} is not finite"));
    }
    Ok(v * scale)
}

/// A Go-style duration (`300ms`, `1.5s`, `1m30s`, `2h`, `100us`); a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a duration (e.g. 500ms, 10s, 1m30s)");
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| bad());
    }
    let mut total = 0f64;
    let mut rest = t;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if number_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * seconds_per_unit;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// `127.0.0.40-127.0.0.60` (inclusive), `a,b,c`, or one address.
pub fn parse_source_addrs(text: &str) -> Result<Vec<Ipv4Addr>, String> {
    let parse_ip = |s: &str| {
        s.trim()
            .parse::<Ipv4Addr>()
            .map_err(|_| format!("{s:?} is not an IPv4 address"))
    };
    let addrs: Vec<Ipv4Addr> = if let Some((from, to)) = text.split_once('-') {
        let (from, to) = (u32::from(parse_ip(from)?), u32::from(parse_ip(to)?));
        if to < from {
            return Err(format!("empty address range {text:?}"));
        }
        if (to - from) as usize >= SOURCE_ADDRS_MAX {
            return Err(format!(
                "more than {SOURCE_ADDRS_MAX} addresses in {text:?}"
            ));
        }
        (from..=to).map(Ipv4Addr::from).collect()
    } else {
        text.split(',').map(parse_ip).collect::<Result<_, _>>()?
    };
    if addrs.len() > SOURCE_ADDRS_MAX {
        return Err(format!(
            "more than {SOURCE_ADDRS_MAX} addresses in {text:?}"
        ));
    }
    Ok(addrs)
}

/// The help text: everything, or one scenario's line plus the flags.
pub fn help(topic: &str) -> String {
    let mut out = String::new();
    out.push_str(
        "loadgen: load generator for praetor and its peers (Consul, etcd, DNS servers)\n\n\
         USAGE\n  \
         loadgen <scenario> --target URL [--connections N] [--duration 10s] [--rate R] [--threads T] [--json] [flags]\n  \
         loadgen compare <scenario> --target-a URL --target-b URL [--runs 5] [--pause 1s] [--metric FIELD]\n          \
         [--name-a N] [--name-b N] [--etcd-a URL] [--etcd-b URL] [--scenario-a S] [--scenario-b S]\n          \
         [--<flag>-a V] [--<flag>-b V] [flags for both sides]\n  \
         loadgen chart --input RESULT.json --output CHART.png [--title T]\n         loadgen fanout-floor --listen IP:PORT [--threads N] [--duration D] [--answer-file F] [--pretty-answer-file F]   (least-work server for blocking-fanout; with --answer-file, the byte floor of a large GET)\n         loadgen floor http|dns --listen IP:PORT [--threads N] [--duration D]   (the HTTP and DNS floors: the least work per request on this runtime)\n\nSCENARIOS\n",
    );
    for s in Scenario::ALL {
        if topic.is_empty() || topic == s.name() {
            out.push_str(&format!("  {:<16} {}\n", s.name(), s.summary()));
        }
    }
    out.push_str("\nFLAGS\n");
    for f in RUN_FLAGS {
        let left = match f.value {
            Some(v) => format!("--{} {}", f.name, v),
            None => format!("--{}", f.name),
        };
        out.push_str(&format!("  {left:<40} {}\n", f.help));
    }
    out.push_str(
        "\nClosed loop by default (each connection sends as soon as its previous answer is in);\n\
         --rate switches to open loop, where latency is measured from each request's intended\n\
         send time (corrected for coordinated omission). Errors are counted, never fatal.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    fn run(line: &str) -> RunConfig {
        match parse(&args(line)).unwrap() {
            Command::Run(c) => *c,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn a_full_kv_get_command_line() {
        let c = run(
            "kv-get --target http://127.0.0.1:18500 --connections 64 --duration 5s \
                     --threads 2 --json --key a/b --keys 10 --consistency stale",
        );
        assert_eq!(c.scenario, Scenario::KvGet);
        assert_eq!(c.target.as_deref(), Some("http://127.0.0.1:18500"));
        assert_eq!(c.connections, 64);
        assert_eq!(c.duration, Duration::from_secs(5));
        assert_eq!(c.threads, 2);
        assert!(c.json);
        assert_eq!(c.key, "a/b");
        assert_eq!(c.keys, 10);
        assert_eq!(c.consistency, Consistency::Stale);
        assert_eq!(c.rate, None);
    }

    #[test]
    fn inline_values_suffixes_and_switches() {
        let c = run("blocking-fanout --target=http://h:1 --watchers=15k \
                     --source-addrs 127.0.0.40-127.0.0.42 --watch health --check-id c1");
        assert_eq!(c.watchers, 15_000);
        assert_eq!(c.watch, WatchKind::Health);
        assert_eq!(
            c.source_addrs,
            vec![
                Ipv4Addr::new(127, 0, 0, 40),
                Ipv4Addr::new(127, 0, 0, 41),
                Ipv4Addr::new(127, 0, 0, 42)
            ]
        );
        assert_eq!(c.check_id.as_deref(), Some("c1"));
        assert_eq!(c.sched_policy, SchedPolicy::Normal);
        let batch = run("blocking-fanout --target http://h:1 --sched batch");
        assert_eq!(batch.sched_policy, SchedPolicy::Batch);
        let open = run("dns --target 127.0.0.1:53 --rate 50k --qtype srv --tcp");
        assert_eq!(open.rate, Some(50_000.0));
        assert_eq!(open.qtype, QueryType::Srv);
        assert!(open.tcp);
        assert_eq!(open.effective_qname(), "web.service.consul");
    }

    #[test]
    fn errors_are_messages() {
        let cases = [
            ("kv-get", "--target is required"),
            ("kv-get --target x --connections 0", "outside"),
            ("kv-get --target x --connections", "needs a value"),
            ("kv-get --target x --bogus 1", "unknown flag --bogus"),
            ("kv-get --target x --json=1", "takes no value"),
            ("kv-get --target x --duration 10parsecs", "not a duration"),
            ("kv-get --target x stray", "unexpected argument"),
            (
                "kv-get --target x --sched fifo",
                "--sched takes normal or batch",
            ),
            (
                "kv-get --target x --io aio",
                "--io takes auto, uring or epoll, not \"aio\"",
            ),
            ("dns --target x --etcd", "no --etcd mode"),
            ("kv-mixed --target x --read-ratio 1.5", "within 0..1"),
            ("kv-get --target x --rate 0", "--rate must be"),
            (
                "blocking-fanout --target x --check-id c",
                "needs --watch health",
            ),
            ("register --target x", "needs --instances"),
            ("frobnicate", "unknown command"),
            ("kv-put --target x --value-bytes 17m", "outside"),
            (
                "kv-get --target x --source-addrs 127.0.0.9-127.0.0.1",
                "empty address range",
            ),
        ];
        for (line, expected) in cases {
            let err = parse(&args(line)).expect_err(line);
            assert!(err.contains(expected), "{line}: {err}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        for bad in ["", "s", "10x", "-1s", "1.2.3s", "ms10"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn counts_and_floats() {
        assert_eq!(parse_count("15k", 0, usize::MAX).unwrap(), 15_000);
        assert_eq!(parse_count("2M", 0, usize::MAX).unwrap(), 2_000_000);
        assert_eq!(parse_count("1_000", 0, usize::MAX).unwrap(), 1000);
        assert!(parse_count("-1", 0, 10).is_err());
        assert!(parse_count("11", 0, 10).is_err());
        assert!(parse_count("99999999999999999999k", 0, usize::MAX).is_err());
        assert_eq!(parse_float("1.5k").unwrap(), 1500.0);
        assert!(parse_float("inf").is_err());
    }

    #[test]
    fn source_address_forms() {
        assert_eq!(parse_source_addrs("127.0.0.1").unwrap().len(), 1);
        assert_eq!(parse_source_addrs("127.0.0.1,127.0.0.2").unwrap().len(), 2);
        assert_eq!(
            parse_source_addrs("127.0.0.40-127.0.0.99").unwrap().len(),
            60
        );
        assert!(parse_source_addrs("127.0.0.1-128.0.0.1").is_err());
        assert!(parse_source_addrs("localhost").is_err());
    }

    #[test]
    fn compare_applies_shared_and_per_side_flags() {
        let cmd = parse(&args(
            "compare kv-get --target-a http://a:1 --target-b http://b:2 --runs 3 \
             --connections 32 --consistency-b stale --name-a floor --json",
        ))
        .unwrap();
        let Command::Compare(c) = cmd else {
            panic!("not a compare")
        };
        assert_eq!(c.runs, 3);
        assert_eq!(c.a.target.as_deref(), Some("http://a:1"));
        assert_eq!(c.b.target.as_deref(), Some("http://b:2"));
        assert_eq!((c.a.connections, c.b.connections), (32, 32));
        assert_eq!(c.a.consistency, Consistency::Default);
        assert_eq!(c.b.consistency, Consistency::Stale);
        assert_eq!(c.name_a, "floor");
        assert_eq!(c.name_b, "http://b:2");
        assert!(c.json && !c.a.json && !c.b.json);
        assert_eq!(c.metric, "throughput_rps");
    }

    #[test]
    fn compare_with_etcd_and_different_scenarios() {
        let cmd = parse(&args(
            "compare --scenario-a kv-put --scenario-b catalog-churn --target http://p:1 \
             --metric registrations_per_s",
        ))
        .unwrap();
        let Command::Compare(c) = cmd else {
            panic!("not a compare")
        };
        assert_eq!(
            (c.a.scenario, c.b.scenario),
            (Scenario::KvPut, Scenario::CatalogChurn)
        );
        assert_eq!(c.a.target, c.b.target);

        let cmd = parse(&args(
            "compare kv-put --etcd-a http://e:1 --target-b http://p:2",
        ))
        .unwrap();
        let Command::Compare(c) = cmd else {
            panic!("not a compare")
        };
        assert!(c.a.etcd && !c.b.etcd);
        assert_eq!(c.a.target.as_deref(), Some("http://e:1"));
        assert_eq!(c.name_a, "etcd http://e:1");

        assert!(parse(&args("compare --target x"))
            .unwrap_err()
            .contains("needs a scenario"));
        assert!(parse(&args("compare kv-get --target-a x"))
            .unwrap_err()
            .contains("side B"));
        assert!(parse(&args("compare kv-get --nonsense-a 1 --target x"))
            .unwrap_err()
            .contains("unknown flag"));
    }

    #[test]
    fn chart_and_help() {
        let Command::Chart(c) = parse(&args("chart --input r.json --output r.png")).unwrap() else {
            panic!("not a chart")
        };
        assert_eq!(
            (c.input.as_str(), c.output.as_str(), c.title),
            ("r.json", "r.png", None)
        );
        assert!(parse(&args("chart --input r.json")).is_err());
        assert_eq!(parse(&[]).unwrap(), Command::Help(String::new()));
        assert_eq!(
            parse(&args("kv-get --help")).unwrap(),
            Command::Help("kv-get".into())
        );
        let text = help("");
        for f in RUN_FLAGS {
            assert!(
                text.contains(&format!("--{}", f.name)),
                "{} missing from help",
                f.name
            );
        }
        for s in Scenario::ALL {
            assert!(text.contains(s.name()));
        }
    }
}
